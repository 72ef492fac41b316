import type { ScheduledEvent } from 'aws-lambda';
import { reconcileVessels } from '../vessels/reconciler.ts';
import { gatewayFunction } from './middleware.ts';

/**
 * Every minute (and locally at start-up and periodically): re-drives vessels that are due but not moving, and ends
 * FAILED (never re-runs) executing ones whose executor stopped (docs/incubate.md, "The table is the source of truth").
 */
export const handler = gatewayFunction<ScheduledEvent, void>(async () => {
  await reconcileVessels();
});

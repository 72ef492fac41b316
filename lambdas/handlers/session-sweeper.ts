import type { ScheduledEvent } from 'aws-lambda';
import { sweepSessions } from '../sessions/sweeper.ts';
import { gatewayFunction } from './middleware.ts';

/** Every minute: closes idle /ws connections and frees turns whose worker stopped (docs/ws.md, "Limits"). */
export const handler = gatewayFunction<ScheduledEvent, void>(async () => {
  await sweepSessions();
});

import middy from '@middy/core';
import type { ScheduledEvent } from 'aws-lambda';
import { sweepSessions } from '../sessions/sweeper.ts';
import { observability } from './middleware.ts';

/** Every minute: closes idle /ws connections and frees turns whose worker stopped (docs/ws.md, "Limits"). */
export const handler = middy<ScheduledEvent, void>()
  .use(observability())
  .handler(async () => {
    await sweepSessions();
  });

import { queryPages } from '../store/pages.ts';
import { env } from '../config/env.ts';
import { SESSIONS_PROJECT_INDEX } from '../store/tables.ts';
import type { SessionState } from './states.ts';

/**
 * A project's /ws sessions, newest first, for its owner (the console): one query of the Sessions table's `project`
 * index (projectId, createdAt; lambdas/store/tables.ts), never a scan, and never the conversation — the index holds
 * the ids, the owner, the state and the message count only. A session is kept SESSION_RETENTION_SECONDS after its
 * last change (the table's TTL), so the listing is the sessions still resumable.
 *
 * Load: an entry changes with its session's state and message count, a few writes a turn; turns run at most a tier's
 * concurrency at once per developer, far below one index partition's 1,000 writes a second.
 */

export interface ListedSession {
  sessionId: string;
  userId: string;
  state: SessionState;
  messages: number;
  createdAt: string;
}

export async function listSessions(query: { projectId: string; limit?: number }): Promise<ListedSession[]> {
  const limit = Math.min(Math.max(1, Math.floor(query.limit ?? 50)), 1000);
  const sessions: ListedSession[] = [];
  const pages = queryPages(
    {
      TableName: env().SESSIONS_TABLE,
      IndexName: SESSIONS_PROJECT_INDEX,
      KeyConditionExpression: 'projectId = :p',
      ExpressionAttributeValues: { ':p': query.projectId },
      ScanIndexForward: false,
    },
    () => limit - sessions.length,
  );
  for await (const out of pages) {
    for (const item of out.Items ?? []) {
      sessions.push({
        sessionId: String(item.sessionId),
        userId: String(item.userId),
        state: item.state as SessionState,
        messages: Number(item.messages ?? 0),
        createdAt: new Date(Number(item.createdAt)).toISOString(),
      });
    }
    if (sessions.length >= limit) break;
  }
  return sessions;
}

import type { PutItemCommandInput, UpdateItemCommandInput } from '@aws-sdk/client-dynamodb';
import { inEveryInstance } from '../../bin/local/instances.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { storeWire } from '../../lambdas/store/dynamo.ts';

/** A write request as the conditional writes send it (store/conditional.ts): an UpdateItem or a PutItem. */
export type WriteInput = Partial<UpdateItemCommandInput & PutItemCommandInput>;

export interface AnswerLoss {
  /**
   * Drops the answer of the next write `match` accepts (once), after DynamoDB applied it; `between` runs before the
   * SDK sends it again (another writer's write landing between the two sends).
   */
  loseNext(name: string, match: (input: WriteInput) => boolean, between?: () => Promise<unknown>): void;
  /** The names of the writes whose answer was dropped, in order. */
  readonly lost: string[];
  /** Rules armed and not yet fired. */
  pending(): string[];
}

/**
 * Loses the answers of chosen conditional writes, as a connection dropped after DynamoDB applied them would: the error
 * is a retryable network error (ECONNRESET), so the write is sent again (the SDK's retry strategy), and that send
 * meets the first one's result. The step sits inside the retry loop (store/wire.ts, an `attempt` step).
 *
 * The store wires are built again first (instance state reset): call this before the traffic it concerns, when
 * nothing is in flight.
 */
export function loseAnswers(): AnswerLoss {
  const rules: { name: string; match: (input: WriteInput) => boolean; between?: () => Promise<unknown> }[] = [];
  const lost: string[] = [];
  resetInstanceState();
  // Every function of a running gateway has a write client of its own (bin/local/instances.ts), and so does the test.
  inEveryInstance(() =>
    storeWire().steps.attempt.push(async (call, next) => {
      const out = await next();
      const index = rules.findIndex((r) => r.match(call.input as WriteInput));
      if (index >= 0) {
        const [rule] = rules.splice(index, 1);
        lost.push(rule!.name);
        await rule!.between?.();
        throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
      }
      return out;
    }),
  );
  return {
    loseNext: (name, match, between) => void rules.push({ name, match, ...(between ? { between } : {}) }),
    lost,
    pending: () => rules.map((r) => r.name),
  };
}

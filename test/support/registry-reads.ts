import { documentClient } from '../../lambdas/store/dynamo.ts';
import type { TestGateway } from './gateway.ts';

/**
 * Counts the registry reads (GetCommand on the registry table) the in-process gateway makes from now on: how the
 * tests show that a check rides on the cached project record (registry/project-cache.ts) instead of reading the store.
 * Each call adds its own counter to the shared client's middleware stack, under its own name.
 */
let counters = 0;
export function countRegistryReads(gw: Pick<TestGateway, 'tables'>): { count: number } {
  const reads = { count: 0 };
  documentClient().middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as { TableName?: string };
      if (context.commandName === 'GetCommand' && input.TableName === gw.tables.REGISTRY_TABLE) reads.count++;
      return next(args);
    },
    { step: 'initialize', name: `countRegistryReads${++counters}` },
  );
  return reads;
}

import type { TestProject } from 'vitest/node';
import { startDynamoLocal } from '../../bin/local/dynamodb.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    dynamoEndpoint: string;
  }
}

export default async function setup(project: TestProject) {
  let dynamo: Awaited<ReturnType<typeof startDynamoLocal>>;
  try {
    dynamo = await startDynamoLocal();
  } catch (err) {
    // Without Java no test can run; say what to install, as `npm start` does, instead of a stack trace into vitest.
    if ((err as Error).name === 'JavaRequiredError') {
      process.stderr.write(`\nnpm test: ${(err as Error).message}\n\n`);
      process.exit(1);
    }
    throw err;
  }
  project.provide('dynamoEndpoint', dynamo.endpoint);
  return () => dynamo.stop();
}

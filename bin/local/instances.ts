import { AsyncLocalStorage } from 'node:async_hooks';
import type { FunctionSpec } from '../../lambdas/handlers/manifest.ts';
import { setInstanceResolver } from '../../lambdas/instance/state.ts';
import { QUEUES } from '../../lambdas/store/queues.ts';

/**
 * Each function of the manifest as its own Lambda, inside the one local process (docs/local.md, "As strict as AWS").
 * In AWS every function has its own environment — only the variables its manifest entry grants — its own instances
 * (clients, caches) and its own role. Locally every handler is loaded into one process, so an invocation runs in an
 * async context that names its function, and:
 * - `process.env` answers from that function's environment (and the invocation's trace header, `_X_AMZN_TRACE_ID`),
 *   so the AWS SDK and env() (lambdas/config/env.ts) read what the deployed function would;
 * - instance state (lambdas/instance/state.ts) is kept per function;
 * - the function's credentials name it (`AWS_ACCESS_KEY_ID`), which is how the local IAM (bin/local/iam.ts) knows whose
 *   call it checks.
 * Code outside any invocation (the test process, the CLI, the runtime itself) keeps the process's own environment.
 */

/** One invocation: its function, and the environment `process.env` shows it. */
interface Invocation {
  readonly functionId: string;
  readonly env: Record<string, string | undefined>;
}

const invocations = new AsyncLocalStorage<Invocation>();

/** The function whose invocation is running, if any. */
export function currentFunction(): string | undefined {
  return invocations.getStore()?.functionId;
}

/** The access key id a function's calls are signed with locally: its identity for the local IAM. */
export function localAccessKeyId(functionId: string): string {
  return `LOCAL${functionId.toUpperCase()}`;
}

/**
 * Variables whose presence is a grant: the stack sets them only on functions whose manifest entry has the access
 * (lib/gateway-stack.ts), so locally only those functions see them. Everything else the runtime sets (table names,
 * stage, region, timings, a test's overrides) every function sees, as every deployed function is told every table.
 */
function grantedVariables(spec: FunctionSpec): { readonly granted: ReadonlySet<string>; readonly controlled: ReadonlySet<string> } {
  const { access } = spec;
  const controlled = new Set<string>();
  const granted = new Set<string>();
  const control = (names: readonly string[], allowed: boolean) => {
    for (const name of names) {
      controlled.add(name);
      if (allowed) granted.add(name);
    }
  };
  // Providers: the upstreams, the service's Anthropic key (a secret's ARN in AWS, the key itself locally).
  control(['ANTHROPIC_BASE_URL', 'OPENAI_BASE_URL', 'OPENROUTER_BASE_URL', 'ANTHROPIC_API_KEY', 'ANTHROPIC_API_KEY_SECRET_ARN'], access.providers);
  // The provider-keys key (KMS in AWS, a key file locally): decrypt for providers, encrypt or decrypt alone.
  control(['PROVIDER_KEYS_KMS_KEY_ID', 'PROVIDER_KEYS_LOCAL_KEY_FILE'], access.providers || !!access.encrypts || !!access.decrypts);
  control(['SCHEDULE_GROUP_NAME', 'SCHEDULER_ROLE_ARN', 'SCHEDULER_ENDPOINT'], !!access.scheduler);
  for (const queue of QUEUES) {
    control([queue.envVar, queue.arnEnvVar], access.queues.includes(queue.name));
    control([queue.deadLetterEnvVar], (access.deadLetters ?? []).includes(queue.name));
  }
  // The WebSocket API's management endpoint: the stack tells the functions with `connections`; the handler reads it
  // from its events in AWS, and locally from here (the stand-in's endpoint is plain http).
  control(['WEBSOCKET_CALLBACK_URL'], !!access.connections || spec.trigger.kind === 'websocket');
  return { granted, controlled };
}

/**
 * The environment a function runs with locally: the runtime's environment without the variables its manifest entry
 * does not grant, its own credentials and name, and the local IAM's endpoints in place of DynamoDB's and SQS's.
 */
export function functionEnvironment(
  spec: FunctionSpec,
  functionName: string,
  environment: Readonly<Record<string, string | undefined>>,
  endpoints: { readonly dynamo: string; readonly sqs: string },
): Record<string, string | undefined> {
  const { granted, controlled } = grantedVariables(spec);
  const env: Record<string, string | undefined> = {};
  for (const [key, value] of Object.entries(environment)) {
    if (value === undefined || (controlled.has(key) && !granted.has(key))) continue;
    env[key] = value;
  }
  env.AWS_ACCESS_KEY_ID = localAccessKeyId(spec.id);
  env.AWS_SECRET_ACCESS_KEY = 'local';
  delete env.AWS_SESSION_TOKEN;
  delete env.AWS_PROFILE;
  env.AWS_LAMBDA_FUNCTION_NAME = functionName;
  env.DYNAMODB_ENDPOINT = endpoints.dynamo;
  env.SQS_ENDPOINT = endpoints.sqs;
  return env;
}

/** The process's own environment object, while an instance environment is installed in its place. */
let processEnvironment: NodeJS.ProcessEnv | undefined;
let installs = 0;

/**
 * Puts an environment in place of `process.env` that answers, inside an invocation, from that invocation's
 * environment, and outside from the process's own; and keys instance state by function. Undone by the returned
 * function (the last gateway of the process to stop puts `process.env` back).
 */
export function installInstances(): () => void {
  if (installs++ === 0) {
    const own = process.env;
    processEnvironment = own;
    const target = (): Record<string, string | undefined> => invocations.getStore()?.env ?? own;
    process.env = new Proxy(own, {
      get: (_t, key) => (typeof key === 'string' ? target()[key] : Reflect.get(own, key)),
      set: (_t, key, value) => {
        if (typeof key !== 'string') return false;
        target()[key] = String(value);
        return true;
      },
      has: (_t, key) => typeof key === 'string' && key in target(),
      deleteProperty: (_t, key) => (typeof key === 'string' ? delete target()[key] : true),
      ownKeys: () => Reflect.ownKeys(target()),
      getOwnPropertyDescriptor: (_t, key) => {
        if (typeof key !== 'string') return undefined;
        const value = target()[key];
        return value === undefined ? undefined : { value, writable: true, enumerable: true, configurable: true };
      },
    });
    setInstanceResolver(currentFunction);
  }
  let undone = false;
  return () => {
    if (undone) return;
    undone = true;
    if (--installs === 0 && processEnvironment) {
      process.env = processEnvironment;
      processEnvironment = undefined;
      setInstanceResolver(undefined);
    }
  };
}

/**
 * Runs `call` as an invocation of `functionId` with `environment` (functionEnvironment()) and the invocation's trace
 * header: everything it starts, awaits or schedules — the work after its response included — stays that function's.
 */
export function invokeAs<T>(functionId: string, environment: Readonly<Record<string, string | undefined>>, trace: string, call: () => T): T {
  return invocations.run({ functionId, env: { ...environment, _X_AMZN_TRACE_ID: trace } }, call);
}

/** The environments of the functions of the running gateways, by function id (registerFunctions()). */
const registered = new Map<string, Readonly<Record<string, string | undefined>>>();

/** Makes a gateway's functions known to inEveryInstance(); undone by the returned function. */
export function registerFunctions(environments: ReadonlyMap<string, Readonly<Record<string, string | undefined>>>): () => void {
  for (const [id, environment] of environments) registered.set(id, environment);
  return () => {
    for (const [id, environment] of environments) if (registered.get(id) === environment) registered.delete(id);
  };
}

/**
 * Runs `call` once outside any function and once as each function of the running gateways: for a test that reaches
 * into instance state (a step added to an SDK client's middleware, say), which every function now holds its own of.
 */
export function inEveryInstance(call: () => void): void {
  call();
  for (const [id, environment] of registered) invokeAs(id, environment, 'Root=1-00000000-000000000000000000000000', call);
}

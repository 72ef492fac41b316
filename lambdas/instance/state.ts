/**
 * Everything a Lambda instance keeps between invocations — the parsed environment, SDK clients, the provider-key
 * cipher, the service key, caches — is declared through this module, so one call (`resetInstanceState`) forgets all
 * of it. The local runtime calls it after setting the environment and tests call it between setups; neither keeps a
 * list of its own that a new cache could be missing from (docs/architecture.md, "Instance state").
 */
const resets = new Set<() => void>();

/**
 * Which instance the running code belongs to. A Lambda process is one instance of one function, so in AWS there is one
 * key (undefined). The local runtime runs every function of the manifest in one process and says which one an
 * invocation belongs to (bin/local/instances.ts), so each function keeps its own clients, caches and parsed
 * environment — its own grants — as its Lambda would (docs/local.md, "As strict as AWS").
 */
let currentInstance: () => string | undefined = () => undefined;

/** Set by the local runtime only; `undefined` goes back to one instance per process. */
export function setInstanceResolver(resolve: (() => string | undefined) | undefined): void {
  currentInstance = resolve ?? (() => undefined);
}

export interface InstanceValue<T> {
  /** The value, created on first use after start or after a reset. */
  (): T;
  /** Forgets the value (disposing of it when it can be), so the next call creates it again. */
  reset(): void;
}

/**
 * A lazily created per-instance value. A creator that returns a rejected promise is forgotten at once, so a failed
 * read (a secret, a key file) is retried on the next use instead of being remembered.
 */
export function instanceValue<T>(create: () => T, dispose?: (value: T) => void): InstanceValue<T> {
  const holders = new Map<string | undefined, { value: T }>();
  const get = (() => {
    const key = currentInstance();
    let holder = holders.get(key);
    if (!holder) {
      const value = create();
      const current = { value };
      holder = current;
      holders.set(key, current);
      if (value instanceof Promise) {
        value.catch(() => {
          if (holders.get(key) === current) holders.delete(key);
        });
      }
    }
    return holder.value;
  }) as InstanceValue<T>;
  get.reset = () => {
    if (dispose) for (const holder of holders.values()) dispose(holder.value);
    holders.clear();
  };
  resets.add(get.reset);
  return get;
}

/** Registers the reset of state that is not a single lazily made value (a Map cache, a set of pending work). */
export function onInstanceReset(reset: () => void): void {
  resets.add(reset);
}

/** Forgets every per-instance value and cache: the environment is read again, clients are rebuilt. */
export function resetInstanceState(): void {
  for (const reset of resets) reset();
}

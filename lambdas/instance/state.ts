/**
 * Everything a Lambda instance keeps between invocations — the parsed environment, SDK clients, the provider-key
 * cipher, the service key, caches — is declared through this module, so one call (`resetInstanceState`) forgets all
 * of it. The local runtime calls it after setting the environment and tests call it between setups; neither keeps a
 * list of its own that a new cache could be missing from (docs/architecture.md, "Instance state").
 */
const resets = new Set<() => void>();

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
  let holder: { value: T } | undefined;
  const get = (() => {
    if (!holder) {
      const value = create();
      const current = { value };
      holder = current;
      if (value instanceof Promise) {
        value.catch(() => {
          if (holder === current) holder = undefined;
        });
      }
    }
    return holder.value;
  }) as InstanceValue<T>;
  get.reset = () => {
    if (holder && dispose) dispose(holder.value);
    holder = undefined;
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

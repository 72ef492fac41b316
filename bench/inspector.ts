/**
 * A minimal Chrome DevTools Protocol client for the gateway process, which the bench starts with
 * `--inspect=127.0.0.1:<port>`: the memory part forces a full GC there and reads the V8 heap's live size, which RSS
 * cannot tell (a heap with room left from earlier runs takes new streams without growing RSS); the CPU part takes a
 * sampling profile of a load run to split the CPU per request by layer. With no session attached, as during every
 * other part, the inspector costs the process nothing measurable.
 */
/** The parts of a V8 CPU profile (Chrome DevTools Protocol, Profiler.Profile) the bench reads. */
export interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string }; children?: number[] }[];
  /** The node sampled at each tick, and the microseconds since the previous sample. */
  samples: number[];
  timeDeltas: number[];
}

export interface Inspector {
  /** Live heap after a full garbage collection, MB. */
  liveHeapMb(): Promise<number>;
  /** A V8 CPU profile of the process while `during` runs (bench/cpu-layers.ts reads it). */
  cpuProfile(during: () => Promise<void>, samplingIntervalUs?: number): Promise<CpuProfile>;
  close(): void;
}

export async function connectInspector(port: number): Promise<Inspector> {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { webSocketDebuggerUrl: string }[];
  const url = targets[0]?.webSocketDebuggerUrl;
  if (!url) throw new Error(`no inspector target on port ${port}`);
  const socket = new WebSocket(url);
  await new Promise<void>((resolve, reject) => {
    socket.addEventListener('open', () => resolve(), { once: true });
    socket.addEventListener('error', () => reject(new Error(`could not connect to the inspector at ${url}`)), { once: true });
  });
  let nextId = 0;
  const pending = new Map<number, (result: unknown) => void>();
  socket.addEventListener('message', (event) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown };
    if (message.id !== undefined) pending.get(message.id)?.(message.result);
  });
  const call = (method: string, params?: Record<string, unknown>) =>
    new Promise<unknown>((resolve) => {
      const id = ++nextId;
      pending.set(id, resolve);
      socket.send(JSON.stringify({ id, method, params }));
    });
  return {
    async liveHeapMb() {
      await call('HeapProfiler.collectGarbage');
      const usage = (await call('Runtime.getHeapUsage')) as { usedSize: number };
      return usage.usedSize / (1024 * 1024);
    },
    async cpuProfile(during, samplingIntervalUs = 200) {
      await call('Profiler.enable');
      await call('Profiler.setSamplingInterval', { interval: samplingIntervalUs });
      await call('Profiler.start');
      const stop = async () => {
        const { profile } = (await call('Profiler.stop')) as { profile: CpuProfile };
        await call('Profiler.disable');
        return profile;
      };
      try {
        await during();
      } catch (err) {
        await stop();
        throw err;
      }
      return stop();
    },
    close: () => socket.close(),
  };
}

/**
 * A minimal Chrome DevTools Protocol client for the gateway process, which the bench starts with
 * `--inspect=127.0.0.1:<port>`: the memory part forces a full GC there and reads the V8 heap's live size, which RSS
 * cannot tell (a heap with room left from earlier runs takes new streams without growing RSS). With no session
 * attached, as during every other part, the inspector costs the process nothing measurable.
 */
export interface Inspector {
  /** Live heap after a full garbage collection, MB. */
  liveHeapMb(): Promise<number>;
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
  const call = (method: string) =>
    new Promise<unknown>((resolve) => {
      const id = ++nextId;
      pending.set(id, resolve);
      socket.send(JSON.stringify({ id, method }));
    });
  return {
    async liveHeapMb() {
      await call('HeapProfiler.collectGarbage');
      const usage = (await call('Runtime.getHeapUsage')) as { usedSize: number };
      return usage.usedSize / (1024 * 1024);
    },
    close: () => socket.close(),
  };
}

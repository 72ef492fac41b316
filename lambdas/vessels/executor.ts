/** Placeholder while the vessel domain is written. */
export async function processRunMessage(_body: unknown): Promise<void> {}

/** Placeholder while the vessel domain is written. */
export async function reconcileVessels(_now = new Date()): Promise<{ redriven: number; retried: number; failed: number }> {
  return { redriven: 0, retried: 0, failed: 0 };
}

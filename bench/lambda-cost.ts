/**
 * The channeling function's own Lambda cost, beside the AI spend it meters, and the memory size that follows from
 * the measured figures. Prices: AWS Lambda on arm64 (the stack's architecture, lib/constructs/functions.ts), us-east-1
 * list prices; AI: claude-sonnet-4-6 list prices.
 */
export const ARM64_USD_PER_GB_SECOND = 0.0000133334;
export const USD_PER_MILLION_REQUESTS = 0.2;
/** Lambda allots one full vCPU at 1,769 MB and CPU in proportion to memory below that. */
export const FULL_VCPU_MB = 1769;
export const CANDIDATE_SIZES_MB = [256, 512, 1024, 1769] as const;

/** The typical stream the cost is stated for: 10 s long, ~2,000 input and ~1,000 output tokens of claude-sonnet-4-6. */
export const TYPICAL_STREAM = { seconds: 10, inputTokens: 2000, outputTokens: 1000, usdPerMillionInput: 3, usdPerMillionOutput: 15 } as const;

/** Lambda cost of 1,000 invocations of `seconds` each at `memoryMb` (duration and request charges). */
export function lambdaUsdPer1000(memoryMb: number, seconds = TYPICAL_STREAM.seconds): number {
  return 1000 * ((memoryMb / 1024) * seconds * ARM64_USD_PER_GB_SECOND + USD_PER_MILLION_REQUESTS / 1e6);
}

/** The AI spend the gateway meters for 1,000 typical streams. */
export function aiUsdPer1000(): number {
  const s = TYPICAL_STREAM;
  return 1000 * ((s.inputTokens * s.usdPerMillionInput + s.outputTokens * s.usdPerMillionOutput) / 1e6);
}

/** CPU time a request measured at `cpuMsPerRequest` on one full core takes at `memoryMb` (a CPU share below 1). */
export function cpuMsAt(memoryMb: number, cpuMsPerRequest: number): number {
  return cpuMsPerRequest * Math.max(1, FULL_VCPU_MB / memoryMb);
}

export interface SizeChoice {
  memoryMb: number;
  /** Why this size, in one sentence. */
  reason: string;
}

/**
 * The smallest candidate size that (1) holds the handler's resident memory plus one stream with 2× headroom — a
 * Lambda instance serves one request at a time — and (2) keeps the gateway's own CPU time per request under
 * `cpuBudgetMs` at that size's CPU share, since that time adds to the latency the goals bound.
 */
export function chooseSize(residentMb: number, perStreamMb: number, cpuMsPerRequest: number, cpuBudgetMs: number): SizeChoice {
  const needMb = 2 * (residentMb + Math.max(0, perStreamMb));
  for (const size of CANDIDATE_SIZES_MB) {
    if (size >= needMb && cpuMsAt(size, cpuMsPerRequest) <= cpuBudgetMs) {
      return {
        memoryMb: size,
        reason:
          `the smallest size with twice the memory one invocation needs (${needMb.toFixed(0)} MB ≥ 2 × (${residentMb.toFixed(0)} MB resident + ${perStreamMb.toFixed(2)} MB per stream)) ` +
          `whose CPU share keeps the gateway's ${cpuMsPerRequest.toFixed(2)} ms of CPU per request at or under ${cpuBudgetMs} ms (${cpuMsAt(size, cpuMsPerRequest).toFixed(1)} ms)`,
      };
    }
  }
  // Past one vCPU a single-threaded Node process gains nothing, so the full vCPU is as close as memory gets it.
  return {
    memoryMb: FULL_VCPU_MB,
    reason:
      `memory alone would allow ${CANDIDATE_SIZES_MB.find((size) => size >= needMb) ?? FULL_VCPU_MB} MB (2 × (${residentMb.toFixed(0)} MB resident + ${perStreamMb.toFixed(2)} MB per stream) = ${needMb.toFixed(0)} MB), ` +
      `but the gateway's ${cpuMsPerRequest.toFixed(2)} ms of CPU per request exceeds the ${cpuBudgetMs} ms budget at every CPU share; one full vCPU (${FULL_VCPU_MB} MB) comes closest, and a single-threaded Node process gains nothing beyond it`,
  };
}

/** Conjure endpoints answer errors as `{ error: <code or message>, message?, ...details }` (interface, Errors). */
export function conjureError(status: number, error: string, message?: string, extra: Record<string, unknown> = {}): Response {
  return Response.json({ error, ...(message ? { message } : {}), ...extra }, { status });
}

/**
 * The headers a caller configures for a tool source (an HTTP tool, an MCP server). They usually hold credentials, so a
 * bad one is reported by its name only: the platform's own error quotes the value.
 */
export function toolHeaders(headers: Record<string, string> | undefined): Headers {
  const out = new Headers();
  for (const [name, value] of Object.entries(headers ?? {})) {
    try {
      out.set(name, value);
    } catch {
      throw new Error(`invalid header ${JSON.stringify(name.slice(0, 100))}: the value (not shown) or the name is not allowed in HTTP`);
    }
  }
  return out;
}

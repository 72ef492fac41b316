/**
 * True when some object in a JSON text names the same key twice. JSON.parse keeps the last value silently, so a
 * token payload with two `sub` or `budget` members would mean different things to different parsers; the gateway
 * refuses it instead (docs/contract.md, Tokens). Written by hand because no maintained JSON parser reports duplicate
 * keys; it is an iterative scan (no recursion on client data) over text that must already be valid JSON, and token
 * payloads are at most a few KB.
 */
export function hasDuplicateKeys(json: string): boolean {
  // One entry per open container: the keys seen so far for an object, null for an array.
  const stack: (Set<string> | null)[] = [];
  let expectKey = false;
  for (let i = 0; i < json.length; i++) {
    const c = json[i];
    if (c === '{') {
      stack.push(new Set());
      expectKey = true;
    } else if (c === '[') {
      stack.push(null);
      expectKey = false;
    } else if (c === '}' || c === ']') {
      stack.pop();
      expectKey = false;
    } else if (c === ',') {
      expectKey = stack.at(-1) instanceof Set;
    } else if (c === '"') {
      let end = i + 1;
      while (end < json.length && json[end] !== '"') end += json[end] === '\\' ? 2 : 1;
      if (expectKey) {
        const keys = stack.at(-1) as Set<string>;
        // Decoding the escapes makes "su\u0062" and "sub" the same key, as they are to JSON.parse.
        const key = JSON.parse(json.slice(i, end + 1)) as string;
        if (keys.has(key)) return true;
        keys.add(key);
        expectKey = false;
      }
      i = end;
    }
  }
  return false;
}

/**
 * The size of an item as DynamoDB counts it against its 400 KB item limit (AWS, "Item sizes and formats" in the
 * DynamoDB developer guide), for values as the document client marshals them (undefined left out):
 *   - an attribute: the UTF-8 bytes of its name plus the size of its value;
 *   - a string: its UTF-8 bytes (a lone surrogate is stored as U+FFFD: 3 bytes, as Buffer.byteLength counts it);
 *   - a number: 1 byte, plus 1 per base-100 digit — its significant digits paired from the decimal point — plus 1 for
 *     a negative one; zero is 1 byte (AWS documents it as "about 1 byte per two significant digits, plus 1"; this is
 *     the exact count, as DynamoDB Local applies it: test/vessels/size.test.ts);
 *   - binary: its bytes; a boolean or null: 1 byte;
 *   - a list or a map: 3 bytes, plus 1 byte per element, plus its elements (a map's keys count as names).
 * Records that grow after they are written check against these figures before anything is stored
 * (docs/incubate.md, "Limits").
 */

/** DynamoDB's largest item: 400 KB, counted as 400 × 1,024 bytes. */
export const DYNAMODB_MAX_ITEM_BYTES = 409_600;

export const utf8Bytes = (s: string): number => Buffer.byteLength(s, 'utf8');

/** The size of an item: its attributes' names and values. */
export function itemSize(item: Record<string, unknown>): number {
  let size = 0;
  for (const [name, value] of Object.entries(item)) if (value !== undefined) size += utf8Bytes(name) + valueSize(value);
  return size;
}

/** The size of one attribute value. */
export function valueSize(value: unknown): number {
  if (value === null || typeof value === 'boolean') return 1;
  if (typeof value === 'string') return utf8Bytes(value);
  if (typeof value === 'number' || typeof value === 'bigint') return numberSize(value);
  if (value instanceof Uint8Array) return value.byteLength;
  if (value instanceof Set) {
    let size = 0;
    for (const element of value) size += valueSize(element);
    return size;
  }
  if (Array.isArray(value)) {
    let size = 3;
    for (const element of value) if (element !== undefined) size += 1 + valueSize(element);
    return size;
  }
  if (typeof value === 'object') {
    let size = 3;
    for (const [key, element] of Object.entries(value)) if (element !== undefined) size += 1 + utf8Bytes(key) + valueSize(element);
    return size;
  }
  return 0;
}

function numberSize(n: number | bigint): number {
  if (n === 0 || n === 0n) return 1;
  const text = String(n);
  const negative = text.startsWith('-');
  const [mantissa = '', exponent = '0'] = text.replace('-', '').split(/e/i);
  const [whole = '', fraction = ''] = mantissa.split('.');
  // value = digits × 10^power, digits without leading or trailing zeros
  let digits = (whole + fraction).replace(/^0+/, '');
  let power = Number(exponent) - fraction.length;
  const trailing = /0*$/.exec(digits)![0].length;
  digits = digits.slice(0, digits.length - trailing);
  power += trailing;
  // Base-100 digits, paired from the decimal point.
  if (power % 2 !== 0) digits += '0';
  const pairs = Math.ceil(digits.length / 2);
  return 1 + pairs + (negative ? 1 : 0);
}

/**
 * DynamoDB's refusal of a write whose item would exceed 400 KB (`ValidationException`: "Item size has exceeded the
 * maximum allowed size", or "Item size to update has exceeded …" for an update).
 */
export function isItemTooLarge(err: unknown): boolean {
  const e = err as { name?: string; message?: string } | undefined;
  return e?.name === 'ValidationException' && /item size/i.test(e.message ?? '');
}

/**
 * Writes `text`, whose code units the caller knows are all below 128 (hex digits, decimal digits,
 * an ASCII field), into `out` at `at`, one byte each; returns the offset after it. By hand, since
 * for the short strings of a key a `Buffer.write` costs more than the bytes.
 */
export function writeAscii(out: Uint8Array, at: number, text: string): number {
  for (let k = 0; k < text.length; k++) out[at + k] = text.charCodeAt(k);
  return at + text.length;
}

/** FNV-1a over a string's UTF-16 code units from `basis` (default the standard offset basis), as a u32. */
export function fnv1a(str: string, basis = 0x811c9dc5): number {
  let h = basis >>> 0;
  for (let i = 0; i < str.length; i++) h = Math.imul(h ^ str.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** Folds one more u32 word into an FNV-1a hash `h`. */
export function fnv1aWord(h: number, word: number): number {
  return Math.imul(h ^ word, 0x01000193) >>> 0;
}

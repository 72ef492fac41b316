/**
 * A request the translation cannot carry to the upstream without changing its meaning: answered 400. In a module of
 * its own, apart from errors.ts (the upstream's failures), so that the translation — and what borrows its checks, as
 * /ws does for a client's tool results — loads none of the upstream error handling.
 */
export class TranslationError extends Error {
  override readonly name = 'TranslationError';
}

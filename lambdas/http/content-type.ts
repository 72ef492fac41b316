/**
 * Whether a body of this content type is text, to be carried as a string rather than base64 by the AWS event and
 * result shapes. No content type counts as text: the gateway's own answers always name theirs.
 */
export function isTextual(contentType: string | null | undefined): boolean {
  return !contentType || /json|text|xml|x-www-form-urlencoded|event-stream/i.test(contentType);
}

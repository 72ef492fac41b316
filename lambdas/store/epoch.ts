import { clock } from '../config/clock.ts';
/**
 * Epoch seconds: how the store keeps instants that DynamoDB or a condition expression must compare — TTL attributes
 * (`expiresAt`, which DynamoDB's TTL reads as epoch seconds) and the expiries of holds and leases. Always whole
 * seconds, rounded down, so an instant and its stored form agree on which second it falls in.
 */

/** The whole second `date` falls in. */
export function epochSeconds(date: Date = new Date(clock.now())): number {
  return Math.floor(date.getTime() / 1000);
}

/** The instant a stored epoch-seconds value names (its first millisecond). */
export function fromEpochSeconds(seconds: number): Date {
  return new Date(seconds * 1000);
}

/** The epoch second `seconds` after the second `from` falls in: the value to store as an expiry or TTL. */
export function expiresAfter(from: Date, seconds: number): number {
  return epochSeconds(from) + seconds;
}

/** True once `now` has reached the expiry: something expiring at second `expiresAt` has expired during it. */
export function hasExpired(expiresAt: number, now: Date = new Date(clock.now())): boolean {
  return expiresAt <= epochSeconds(now);
}

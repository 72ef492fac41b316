import { createHash } from 'node:crypto';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { env } from '../config/env.ts';
import type { StoredWebhook } from '../deliveries/record.ts';
import type { CipherOwner } from '../registry/key-cipher.ts';
import { documentClient } from '../store/dynamo.ts';

/**
 * A budget alert that fired (docs/webhooks.md, "Budget alerts"): one item of the usage table per (user, window,
 * meter, threshold) — or (developer, month, threshold) — created by the one conditional write that fires it
 * (fire.ts), so its existence is the "fired" marker; it then holds the alert's delivery as a vessel holds its
 * callback's: the URL and encrypted secret as they were when it fired, the event's fields, and the delivery record
 * (`webhook`, lambdas/deliveries/record.ts) the webhook sender claims and records attempts on.
 */

export type AlertEvent = 'user.budget.threshold' | 'developer.plan.threshold';
export type AlertMeter = 'ai' | 'compute';

/** `user.budget.threshold`: a user's window crossed T % of their budget of one meter (AI µ$, or compute seconds). */
export interface UserAlertPayload {
  projectId: string;
  userId: string;
  window: string;
  /** The window's start, ISO 8601 (as the ledger keys it). */
  windowStart: string;
  meter: AlertMeter;
  threshold: number;
  /** The window's settled use of the meter right after the charge that crossed (µ$ or seconds). */
  used: number;
  /** The user's budget of the meter, as the charge's token claimed it. */
  budget: number;
}

/** `developer.plan.threshold`: a developer's month of compute crossed T % of their plan (planSeconds + poolSeconds). */
export interface DeveloperAlertPayload {
  developerId: string;
  /** The UTC month, `YYYY-MM`. */
  month: string;
  meter: 'compute';
  threshold: number;
  used: number;
  budget: number;
}

export type AlertPayload = { event: 'user.budget.threshold'; fields: UserAlertPayload } | { event: 'developer.plan.threshold'; fields: DeveloperAlertPayload };

export interface StoredAlert {
  pk: string;
  alertId: string;
  kind: 'alert';
  event: AlertEvent;
  fields: UserAlertPayload | DeveloperAlertPayload;
  /** Whose secret it is (the cipher's context): the project's, or the developer's. */
  owner: CipherOwner;
  callback: { url: string; secretCiphertext: string };
  webhook: StoredWebhook;
  /** When it fired (epoch ms). */
  firedAt: number;
  expiresAt?: number;
}

const table = () => env().USAGE_TABLE;

/**
 * The alert's id, from what makes it one alert: the same crossing names the same item from any writer. 38 characters
 * (a schedule's name holds `webhook-<id>-<round>-<attempt>` in 64).
 */
export function alertIdOf(p: AlertPayload): string {
  const f = p.fields;
  const identity =
    p.event === 'user.budget.threshold'
      ? [p.event, p.fields.projectId, p.fields.userId, p.fields.window, p.fields.windowStart, f.meter, f.threshold]
      : [p.event, p.fields.developerId, p.fields.month, f.meter, f.threshold];
  return `alert_${createHash('sha256').update(JSON.stringify(identity)).digest('hex').slice(0, 32)}`;
}

/** The item's key; the format is stored data, so it must never change. */
export const alertKey = (alertId: string) => ({ pk: `alert#${alertId}` });

export async function getAlert(alertId: string): Promise<StoredAlert | undefined> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: alertKey(alertId), ConsistentRead: true }));
  return out.Item as StoredAlert | undefined;
}

/**
 * The body POSTed (docs/webhooks.md, "Budget alerts"): `type`, then the event's fields in a fixed order, so every
 * attempt and every redelivery sends, and signs, the same bytes.
 */
export function alertBody(alert: Pick<StoredAlert, 'event' | 'fields'>) {
  if (alert.event === 'user.budget.threshold') {
    const f = alert.fields as UserAlertPayload;
    return {
      type: alert.event,
      projectId: f.projectId,
      userId: f.userId,
      window: f.window,
      windowStart: f.windowStart,
      meter: f.meter,
      threshold: f.threshold,
      used: f.used,
      budget: f.budget,
    };
  }
  const f = alert.fields as DeveloperAlertPayload;
  return { type: alert.event, developerId: f.developerId, month: f.month, meter: f.meter, threshold: f.threshold, used: f.used, budget: f.budget };
}

/** The bytes sent and signed. */
export const alertBodyText = (alert: Pick<StoredAlert, 'event' | 'fields'>): string => JSON.stringify(alertBody(alert));

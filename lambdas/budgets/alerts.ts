import { fireAlert } from '../alerts/fire.ts';
import { crossedThresholds } from '../alerts/thresholds.ts';
import { DEVELOPER_MONTH_RETAIN_SECONDS, USAGE_WINDOW_RETAIN_SECONDS } from '../config/timing.ts';
import { logger } from '../observability/logger.ts';
import { cachedDeveloper } from '../registry/developer-cache.ts';
import { cachedProject } from '../registry/project-cache.ts';
import { expiresAfter } from '../store/epoch.ts';
import type { Amounts, Meter, WindowRef } from './ledger.ts';
import { monthOf, windowEnd } from './windows.ts';

/**
 * Budget alerts where the ledger settles (docs/webhooks.md, "Budget alerts"): after a settlement won its hold,
 * the window's counters as its own write left them (`SettleOutcome.used`) tell which of the project's thresholds this
 * charge crossed — no read of the window, and, like the rest of the settlement, after the answer was delivered. The
 * thresholds come from the project record the instance has cached (it authenticated the request with it). Each
 * crossing is fired once (alerts/fire.ts). A failure is logged and never undoes or fails the settlement: an alert can
 * be missing after one, never doubled.
 */

const METERS: Meter[] = ['ai', 'compute'];

export async function alertUserWindow(s: { key: WindowRef; budget: Amounts; used: Amounts; charged: Amounts; now: Date }): Promise<void> {
  if (s.charged.ai <= 0 && s.charged.compute <= 0) return;
  try {
    const alerts = (await cachedProject(s.key.projectId))?.alerts;
    if (!alerts) return;
    const end = windowEnd(s.key.window, new Date(s.key.windowStart));
    for (const meter of METERS) {
      for (const threshold of crossedThresholds(alerts[meter] ?? [], s.budget[meter], s.used[meter], s.charged[meter])) {
        await fireAlert({
          alert: {
            event: 'user.budget.threshold',
            fields: {
              projectId: s.key.projectId,
              userId: s.key.userId,
              window: s.key.window,
              windowStart: s.key.windowStart,
              meter,
              threshold,
              used: s.used[meter],
              budget: s.budget[meter],
            },
          },
          owner: { projectId: s.key.projectId },
          target: alerts,
          // As long as the window's own item is kept (a lifetime window's, and its alerts, for good).
          ...(end ? { expiresAt: expiresAfter(end, USAGE_WINDOW_RETAIN_SECONDS) } : {}),
          now: s.now.getTime(),
        });
      }
    }
  } catch (err) {
    logger.error('budget alert not fired', { error: err as Error, projectId: s.key.projectId, userId: s.key.userId });
  }
}

/** The developer's side: their month of compute (`used`, as addDeveloperCompute left it) against their plan. */
export async function alertDeveloperMonth(s: { developerId: string; used: number; charged: number; now: Date }): Promise<void> {
  if (s.charged <= 0) return;
  try {
    const developer = await cachedDeveloper(s.developerId);
    const alerts = developer?.alerts;
    if (!developer || !alerts) return;
    const plan = developer.planSeconds + developer.poolSeconds;
    for (const threshold of crossedThresholds(alerts.compute, plan, s.used, s.charged)) {
      await fireAlert({
        alert: {
          event: 'developer.plan.threshold',
          fields: { developerId: s.developerId, month: monthOf(s.now), meter: 'compute', threshold, used: s.used, budget: plan },
        },
        owner: { developerId: s.developerId },
        target: alerts,
        expiresAt: expiresAfter(s.now, DEVELOPER_MONTH_RETAIN_SECONDS),
        now: s.now.getTime(),
      });
    }
  } catch (err) {
    logger.error('plan alert not fired', { error: err as Error, developerId: s.developerId });
  }
}

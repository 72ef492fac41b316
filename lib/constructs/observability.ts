import { Duration } from 'aws-cdk-lib';
import type * as apigw from 'aws-cdk-lib/aws-apigateway';
import * as cw from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import type { GatewayMetricName } from '../../lambdas/observability/metrics.ts';
import { METRICS_NAMESPACE, serviceName } from './functions.ts';

const PERIOD = Duration.minutes(5);
/** Share of answers that may be 5xx (or of invocations that may fail) before an alarm goes off, in percent. */
const ERROR_RATE_PERCENT = 5;

export interface GatewayObservabilityProps {
  readonly stage: string;
  readonly functions: ReadonlyArray<{ readonly id: string; readonly fn: lambda.IFunction }>;
  /** The conjure REST API, when the stack has one. */
  readonly api?: apigw.RestApi;
  readonly deadLetterQueues: ReadonlyArray<{ readonly id: string; readonly queue: sqs.IQueue }>;
  /** An existing SNS topic alarms notify; without one they only change state (visible on the dashboard). */
  readonly alarmTopicArn?: string;
}

/**
 * One CloudWatch dashboard (traffic, errors, spend, upstream latency, functions, API, dead letters) and the alarms:
 * 5xx rates (API Gateway, gateway answers, each function's failed invocations), Lambda throttles, anything in a
 * dead-letter queue, and any ledger error.
 */
export class GatewayObservability extends Construct {
  readonly dashboard: cw.Dashboard;
  readonly alarms: cw.Alarm[] = [];

  constructor(scope: Construct, id: string, props: GatewayObservabilityProps) {
    super(scope, id);
    const topic = props.alarmTopicArn ? sns.Topic.fromTopicArn(this, 'AlarmTopic', props.alarmTopicArn) : undefined;
    const alarm = (alarmId: string, options: cw.CreateAlarmOptions & { metric: cw.IMetric }): cw.Alarm => {
      const created = new cw.Alarm(this, alarmId, {
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
        ...options,
        alarmName: `prompt-gateway-${props.stage}-${alarmId}`,
      });
      if (topic) created.addAlarmAction(new cwActions.SnsAction(topic));
      this.alarms.push(created);
      return created;
    };

    // --- Gateway metrics (Powertools EMF) ---
    const requests = gatewayMetric(props.stage, 'Requests', 'Sum');
    const errors = gatewayMetric(props.stage, 'Errors', 'Sum');
    const spendUsd = new cw.MathExpression({
      expression: 'spend / 1000000',
      usingMetrics: { spend: gatewayMetric(props.stage, 'SpendMicrodollars', 'Sum') },
      label: 'Spend (USD)',
      period: PERIOD,
    });
    const latencyP50 = gatewayMetric(props.stage, 'UpstreamLatency', 'p50');
    const latencyP99 = gatewayMetric(props.stage, 'UpstreamLatency', 'p99');
    const ledgerErrors = gatewayMetric(props.stage, 'LedgerErrors', 'Sum');

    alarm('GatewayErrorRate', {
      metric: new cw.MathExpression({
        expression: 'IF(requests > 0, 100 * FILL(errors, 0) / requests, 0)',
        usingMetrics: { requests, errors },
        label: '5xx answers (%)',
        period: PERIOD,
      }),
      threshold: ERROR_RATE_PERCENT,
      evaluationPeriods: 3,
      datapointsToAlarm: 2,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
      alarmDescription: `More than ${ERROR_RATE_PERCENT}% of the gateway's answers were 5xx (Errors / Requests).`,
    });
    alarm('LedgerErrors', {
      metric: ledgerErrors,
      threshold: 0,
      evaluationPeriods: 1,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
      alarmDescription: 'A usage-ledger write (reservation or settlement) failed: spend may be unaccounted for. Read the function logs.',
    });

    // --- API Gateway ---
    const { api } = props;
    if (api) {
      const api5xxRate = api.metricServerError({ statistic: cw.Stats.AVERAGE, period: PERIOD });
      alarm('ConjureApi5xxRate', {
        metric: new cw.MathExpression({
          expression: '100 * rate',
          usingMetrics: { rate: api5xxRate },
          label: 'API 5xx (%)',
          period: PERIOD,
        }),
        threshold: ERROR_RATE_PERCENT,
        evaluationPeriods: 3,
        datapointsToAlarm: 2,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        alarmDescription: `More than ${ERROR_RATE_PERCENT}% of conjure API requests answered 5xx (API Gateway 5XXError).`,
      });
    }

    // --- Functions ---
    for (const { id: fnId, fn } of props.functions) {
      alarm(`${fnId}ErrorRate`, {
        metric: new cw.MathExpression({
          expression: 'IF(invocations > 0, 100 * FILL(errors, 0) / invocations, 0)',
          usingMetrics: { invocations: fn.metricInvocations({ period: PERIOD }), errors: fn.metricErrors({ period: PERIOD }) },
          label: `${fnId} failed invocations (%)`,
          period: PERIOD,
        }),
        threshold: ERROR_RATE_PERCENT,
        evaluationPeriods: 3,
        datapointsToAlarm: 2,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        alarmDescription: `More than ${ERROR_RATE_PERCENT}% of ${fnId} invocations failed (Lambda Errors / Invocations).`,
      });
      alarm(`${fnId}Throttles`, {
        metric: fn.metricThrottles({ period: PERIOD, statistic: cw.Stats.SUM }),
        threshold: 0,
        evaluationPeriods: 1,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        alarmDescription: `${fnId} was throttled: the account's or the function's concurrency limit was reached.`,
      });
    }

    // --- Dead letters ---
    const dlqDepth = props.deadLetterQueues.map(({ id: queueId, queue }) => {
      const depth = queue.metricApproximateNumberOfMessagesVisible({ period: PERIOD, statistic: cw.Stats.MAXIMUM, label: queueId });
      alarm(`${queueId}Depth`, {
        metric: depth,
        threshold: 0,
        evaluationPeriods: 1,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        alarmDescription: `${queueId} holds messages that failed every delivery attempt. Inspect, then redrive or delete them.`,
      });
      return depth;
    });

    this.dashboard = new cw.Dashboard(this, 'Dashboard', {
      dashboardName: `prompt-gateway-${props.stage}`,
      defaultInterval: Duration.hours(24),
    });
    const fnMetrics = (pick: (fn: lambda.IFunction, id: string) => cw.IMetric[]) => props.functions.flatMap(({ id: fnId, fn }) => pick(fn, fnId));
    this.dashboard.addWidgets(
      new cw.GraphWidget({ title: 'Requests and 5xx answers', left: [requests, errors], width: 8 }),
      new cw.GraphWidget({ title: 'AI spend (USD)', left: [spendUsd], width: 8 }),
      new cw.GraphWidget({ title: 'Upstream latency (ms)', left: [latencyP50, latencyP99], width: 8 }),
    );
    this.dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Lambda errors and throttles',
        left: fnMetrics((fn, fnId) => [
          fn.metricErrors({ period: PERIOD, label: `${fnId} errors` }),
          fn.metricThrottles({ period: PERIOD, label: `${fnId} throttles` }),
        ]),
        width: 8,
      }),
      new cw.GraphWidget({
        title: 'Lambda duration (ms)',
        left: fnMetrics((fn, fnId) => [
          fn.metricDuration({ period: PERIOD, statistic: cw.Stats.p(50), label: `${fnId} p50` }),
          fn.metricDuration({ period: PERIOD, statistic: cw.Stats.p(99), label: `${fnId} p99` }),
        ]),
        width: 8,
      }),
      new cw.GraphWidget({
        title: 'Lambda invocations',
        left: fnMetrics((fn, fnId) => [fn.metricInvocations({ period: PERIOD, label: fnId })]),
        width: 8,
      }),
    );
    this.dashboard.addWidgets(
      ...(api
        ? [
            new cw.GraphWidget({
              title: 'Conjure API',
              left: [
                api.metricCount({ period: PERIOD, label: 'requests' }),
                api.metricClientError({ period: PERIOD, statistic: cw.Stats.SUM, label: '4xx' }),
                api.metricServerError({ period: PERIOD, statistic: cw.Stats.SUM, label: '5xx' }),
              ],
              right: [api.metricLatency({ period: PERIOD, statistic: cw.Stats.p(99), label: 'latency p99 (ms)' })],
              width: 8,
            }),
          ]
        : []),
      new cw.GraphWidget({ title: 'Dead-letter queue depth', left: dlqDepth, width: 8 }),
      new cw.GraphWidget({ title: 'Ledger errors', left: [ledgerErrors], width: 8 }),
    );
    // Background work: vessels (run-queue triggers, reconciler actions), webhook deliveries (attempts, rounds that
    // ended undelivered — the dead-letter depth above says which of those are exhausted), and /ws sessions (events,
    // turn segments, what the sweeper closed or freed).
    const sum = (names: readonly GatewayMetricName[]) => names.map((name) => gatewayMetric(props.stage, name, 'Sum'));
    this.dashboard.addWidgets(
      new cw.GraphWidget({ title: 'Vessels', left: sum(['VesselTriggers', 'VesselsReconciled']), width: 8 }),
      new cw.GraphWidget({ title: 'Webhook deliveries', left: sum(['WebhookAttempts', 'WebhooksFailed']), width: 8 }),
      new cw.GraphWidget({ title: '/ws sessions', left: sum(['SessionEvents', 'SessionTurns', 'SessionsSwept']), width: 8 }),
    );
    this.dashboard.addWidgets(new cw.AlarmStatusWidget({ title: 'Alarms', alarms: this.alarms, width: 24 }));
  }
}

/**
 * One of the metrics the handlers emit through Powertools (embedded metric format — no PutMetricData permission
 * needed); the names are declared once, in GATEWAY_METRICS (lambdas/observability/metrics.ts).
 */
function gatewayMetric(stage: string, metricName: GatewayMetricName, statistic: string): cw.Metric {
  return new cw.Metric({
    namespace: METRICS_NAMESPACE,
    metricName,
    dimensionsMap: { service: serviceName(stage) },
    statistic,
    period: PERIOD,
    label: statistic === 'Sum' ? metricName : `${metricName} ${statistic}`,
  });
}

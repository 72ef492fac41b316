import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';

/** Embedded-metric-format metrics: requests, errors, spend and upstream latency (dashboard and alarms read these). */
export const metrics = new Metrics({ namespace: 'PromptGateway', serviceName: 'prompt-gateway' });

export { MetricUnit };

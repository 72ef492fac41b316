import { proxyApp } from '../proxy/app.ts';
import { streamingFunction } from './streaming.ts';

/** The channeling function URL: Anthropic's Messages API, metered (SSE piped as the provider produces it). */
export const handler = streamingFunction(proxyApp());

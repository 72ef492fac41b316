import { promptApp } from '../prompt/app.ts';
import { streamingFunction } from './streaming.ts';

/** The /prompt function URL: one-shot agent runs, answered as JSON or as Server-Sent Events while they run. */
export const handler = streamingFunction(promptApp());

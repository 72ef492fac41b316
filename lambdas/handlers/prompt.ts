import { promptApp } from '../prompt/app.ts';
import { streamingFunction } from './streaming.ts';
// A run's end gives its lease back, which wakes the developer's oldest vessel parked for the slot: park.ts registers
// that wake when loaded (plans/leases.ts onCapacityFreed; the manifest grants this function the access it needs).
import '../vessels/park.ts';

/** The /prompt function URL: one-shot agent runs, answered as JSON or as Server-Sent Events while they run. */
export const handler = streamingFunction(promptApp());

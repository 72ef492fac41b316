/** Server-Sent Events, both directions, incrementally: chunks may split anywhere, even inside a UTF-8 character. */

export interface SseEvent {
  /** The `event:` field; undefined when absent (OpenAI sends data-only events). */
  event?: string;
  data: string;
}

export class SseDecoder {
  private buffer = '';
  private readonly text = new TextDecoder();

  /** Feeds bytes; returns the events completed by them. */
  push(chunk: Uint8Array): SseEvent[] {
    this.buffer += this.text.decode(chunk, { stream: true });
    return this.drain();
  }

  /** Call at end of input: returns a final event not followed by a blank line. */
  end(): SseEvent[] {
    this.buffer += this.text.decode();
    if (this.buffer.trim() === '') return [];
    this.buffer += '\n\n';
    return this.drain(true);
  }

  private drain(final = false): SseEvent[] {
    const events: SseEvent[] = [];
    // A CR that ends the input so far may be the first half of a CRLF split across chunks: it waits for the next one.
    const held = !final && this.buffer.endsWith('\r') ? '\r' : '';
    if (held) this.buffer = this.buffer.slice(0, -1);
    this.buffer = this.buffer.replace(/\r\n?/g, '\n');
    for (let boundary = this.buffer.indexOf('\n\n'); boundary !== -1; boundary = this.buffer.indexOf('\n\n')) {
      const block = this.buffer.slice(0, boundary);
      this.buffer = this.buffer.slice(boundary + 2);
      let event: string | undefined;
      const data: string[] = [];
      for (const line of block.split('\n')) {
        if (line === '' || line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon === -1 ? line : line.slice(0, colon);
        let value = colon === -1 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'event') event = value;
        else if (field === 'data') data.push(value);
      }
      if (event !== undefined || data.length) events.push({ event, data: data.join('\n') });
    }
    this.buffer += held;
    return events;
  }
}

const encoder = new TextEncoder();

/** One Anthropic-style event: `event: <type>\ndata: <json>\n\n`. */
export function encodeSse(event: string, data: unknown): Uint8Array {
  return encoder.encode(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}

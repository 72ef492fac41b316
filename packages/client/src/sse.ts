/**
 * Server-Sent Events, read incrementally: chunks may split anywhere — inside a line, between a CR and its LF, inside a
 * UTF-8 character. Written by hand to keep the package free of dependencies (it goes into front-end bundles): the
 * event-stream grammar of the HTML standard is the thirty lines below — lines end with CRLF, LF or CR; a blank line
 * ends an event; `event:` and `data:` fields (one optional space after the colon; several data lines joined with LF);
 * lines starting with ":" are comments; a leading BOM is dropped. `id:` and `retry:` are not used by the gateway.
 */

export interface SseEvent {
  /** The `event:` field; `message` when absent, as EventSource does. */
  event: string;
  data: string;
}

export class SseParser {
  private buffer = '';
  private readonly decoder = new TextDecoder();
  private started = false;
  private event = '';
  private data: string[] = [];

  /** Feeds a chunk; answers the events it completes. */
  push(chunk: Uint8Array | string): SseEvent[] {
    this.buffer += typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true });
    return this.lines(false);
  }

  /** The end of the stream: an event not followed by a blank line is dropped, as the standard says. */
  end(): SseEvent[] {
    this.buffer += this.decoder.decode();
    return this.lines(true);
  }

  private lines(final: boolean): SseEvent[] {
    if (!this.started && this.buffer.length > 0) {
      this.started = true;
      if (this.buffer.startsWith('\uFEFF')) this.buffer = this.buffer.slice(1);
    }
    const events: SseEvent[] = [];
    let start = 0;
    for (;;) {
      const match = /\r\n|\r|\n/g;
      match.lastIndex = start;
      const found = match.exec(this.buffer);
      if (!found) break;
      // A CR at the very end may be the first half of a CRLF split across chunks: wait for the next chunk.
      if (found[0] === '\r' && found.index === this.buffer.length - 1 && !final) break;
      this.line(this.buffer.slice(start, found.index), events);
      start = found.index + found[0].length;
    }
    this.buffer = this.buffer.slice(start);
    if (final) {
      if (this.buffer !== '') this.line(this.buffer, events);
      this.buffer = '';
    }
    return events;
  }

  private line(line: string, events: SseEvent[]): void {
    if (line === '') {
      if (this.data.length > 0) events.push({ event: this.event || 'message', data: this.data.join('\n') });
      this.event = '';
      this.data = [];
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') this.event = value;
    else if (field === 'data') this.data.push(value);
  }
}

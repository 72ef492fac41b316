/**
 * An example webhook receiver for the prompt gateway's vessel callbacks (docs/webhooks.md): it checks each delivery's
 * signature and timestamp, handles each webhook-id once, and logs the vessel's outcome. Only node:http and the
 * package's verifyWebhook.
 *
 *   WEBHOOK_SECRET=the-callback-secret npx tsx examples/webhook-receiver.ts      (PORT=8788 by default)
 *
 * then incubate with `callback: { url: 'http://127.0.0.1:8788/hook', secret: 'the-callback-secret' }` on a local
 * gateway (`npm start`; a deployed gateway refuses loopback URLs, so expose the receiver publicly over https there).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { verifyWebhook } from 'prompt-gateway/webhooks';

const secret = process.env.WEBHOOK_SECRET ?? '';
if (!secret) throw new Error('set WEBHOOK_SECRET to the callback secret given to the gateway');
const port = Number(process.env.PORT ?? 8788);

// Retries and redeliveries carry the same webhook-id: remember the handled ones (a real receiver keeps them in its
// database, next to what it did with them).
const handled = new Set<string>();

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    // Verify the bytes exactly as received: never a re-serialised JSON.parse of them.
    const rawBody = Buffer.concat(chunks);
    const check = verifyWebhook(rawBody, req.headers, secret);
    if (!check.ok) return void res.writeHead(401, { 'content-type': 'text/plain' }).end(check.reason);

    const id = check.scheme === 'standard-webhooks' ? check.webhookId : undefined;
    if (id !== undefined && handled.has(id)) return void res.writeHead(200, { 'content-type': 'text/plain' }).end('duplicate');

    try {
      const delivery = JSON.parse(rawBody.toString('utf8')) as { vesselId: string; status: string; success: boolean };
      console.log(`vessel ${delivery.vesselId} ${delivery.status} (success: ${delivery.success}, webhook-id ${id ?? '-'})`);
      // ... act on the delivery here (its `text` is the result, or the error of a failed run).
      if (id !== undefined) handled.add(id); // remembered once handled: a delivery that failed here is tried again
      res.writeHead(204).end();
    } catch (err) {
      console.error('could not handle the delivery:', err);
      res.writeHead(500).end(); // the gateway tries again later
    }
  });
});

server.listen(port, '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}`);
});

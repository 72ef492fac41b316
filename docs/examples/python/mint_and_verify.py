#!/usr/bin/env python3
"""The prompt gateway from a Python backend: mint an end user's token, verify a vessel's webhook.

The same rules as the @prompt-gateway/client package (packages/client) — tokens: docs/contract.md, "Tokens";
webhooks: docs/webhooks.md. Needs PyJWT (`pip install pyjwt`, or Debian's `python3-jwt`); the rest is the standard
library. The gateway's test suite runs this file (test/clients/package-python.test.ts).

    from mint_and_verify import mint_user_token, verify_webhook, WebhookVerificationError

    token = mint_user_token("acme-app", PROJECT_SECRET, "user-42",
                            {"ai": 2_000_000, "compute": 3600, "window": "day"}, expires_in=3600)

    # In your webhook route, with the raw body bytes (Flask: request.get_data(); Django: request.body):
    try:
        payload = verify_webhook(raw_body, request.headers, CALLBACK_SECRET)
    except WebhookVerificationError as err:
        return err.code, 401

As a command:

    PROJECT_ID=… PROJECT_SECRET=… python3 mint_and_verify.py mint --user user-42 --ai 2000000 --compute 3600 --window day
    python3 mint_and_verify.py verify --secret "$CALLBACK_SECRET" --headers '{"webhook-id": …}' < body.json
"""

import argparse
import base64
import binascii
import hashlib
import hmac
import json
import os
import sys
import time
import uuid

import jwt  # PyJWT

WINDOWS = ("hour", "day", "week", "month", "lifetime")
TOLERANCE_SECONDS = 300


def mint_user_token(project_id, secret, user_id, budget, expires_in=3600, origins=None, now=None):
    """An HS256 JWT: iss = the project, sub = the user, iat, exp, a random jti, the budget, and origins if given.

    budget: {"ai": <integer microdollars>, "compute": <integer seconds>, "window": hour|day|week|month|lifetime}.
    """
    for key in ("ai", "compute"):
        value = budget.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"budget.{key} must be a non-negative whole number, got {value!r}")
    if budget.get("window") not in WINDOWS:
        raise ValueError(f"budget.window must be one of {', '.join(WINDOWS)}, got {budget.get('window')!r}")
    if not isinstance(expires_in, int) or expires_in <= 0:
        raise ValueError("expires_in must be a positive number of seconds")
    iat = int(time.time() if now is None else now)
    claims = {
        "iss": project_id,
        "sub": user_id,
        "iat": iat,
        "exp": iat + expires_in,
        "jti": str(uuid.uuid4()),
        "budget": {"ai": budget["ai"], "compute": budget["compute"], "window": budget["window"]},
    }
    if origins:
        claims["origins"] = list(origins)
    return jwt.encode(claims, secret, algorithm="HS256")


class WebhookVerificationError(Exception):
    """code: no_signature, invalid_headers, timestamp_out_of_tolerance, invalid_signature or invalid_payload."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _keys(secret):
    """The gateway keys its HMACs with the secret's UTF-8 bytes; a Standard Webhooks `whsec_<base64>` secret also
    stands for its decoded bytes, as that standard's libraries use it."""
    keys = [secret.encode("utf-8")]
    if secret.startswith("whsec_"):
        try:
            keys.append(base64.b64decode(secret[len("whsec_"):], validate=True))
        except (binascii.Error, ValueError):
            pass
    return keys


def verify_webhook(raw_body, headers, secret, tolerance=TOLERANCE_SECONDS, now=None):
    """Checks a delivery on its raw body (bytes, as received) and answers the parsed payload.

    With `webhook-signature` (Standard Webhooks) it decides: every `v1,<base64>` entry is compared in constant time with
    the HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>", and the timestamp must be within `tolerance` seconds
    of now. Otherwise `X-Service-Signature`, the hex HMAC-SHA256 of the body. Raises WebhookVerificationError.
    """
    h = {str(k).lower(): str(v) for k, v in dict(headers).items()}
    signatures = h.get("webhook-signature")
    if signatures is not None:
        msg_id = h.get("webhook-id")
        stamp = (h.get("webhook-timestamp") or "").strip()
        if not msg_id:
            raise WebhookVerificationError("invalid_headers", "webhook-id is missing")
        if not stamp.isdigit() or not stamp.isascii() or len(stamp) > 15:
            raise WebhookVerificationError("invalid_headers", "webhook-timestamp is missing or not whole seconds")
        current = int(time.time() if now is None else now)
        if abs(current - int(stamp)) > tolerance:
            raise WebhookVerificationError("timestamp_out_of_tolerance", f"webhook-timestamp is more than {tolerance} s from now")
        signed = f"{msg_id}.{stamp}.".encode("utf-8") + raw_body
        expected = [base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()) for key in _keys(secret)]
        given = [entry.rstrip(",")[3:].encode("utf-8") for entry in signatures.split(" ") if entry.startswith("v1,")]
        if not any(hmac.compare_digest(g, e) for g in given for e in expected):
            raise WebhookVerificationError("invalid_signature", "webhook-signature does not match")
    else:
        hex_signature = h.get("x-service-signature")
        if hex_signature is None:
            raise WebhookVerificationError("no_signature", "No signature: neither webhook-signature nor X-Service-Signature is present")
        expected = hmac.new(secret.encode("utf-8"), raw_body, hashlib.sha256).hexdigest().encode("ascii")
        if not hmac.compare_digest(hex_signature.strip().encode("utf-8"), expected):
            raise WebhookVerificationError("invalid_signature", "X-Service-Signature does not match the body")
    try:
        payload = json.loads(raw_body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise WebhookVerificationError("invalid_payload", "The body is not JSON") from None
    if not isinstance(payload, dict):
        raise WebhookVerificationError("invalid_payload", "The body is not a JSON object")
    return payload


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    mint = commands.add_parser("mint", help="print a token (PROJECT_ID and PROJECT_SECRET from the environment)")
    mint.add_argument("--user", required=True)
    mint.add_argument("--ai", type=int, required=True, help="microdollars")
    mint.add_argument("--compute", type=int, required=True, help="seconds")
    mint.add_argument("--window", default="day", choices=WINDOWS)
    mint.add_argument("--expires-in", type=int, default=3600, help="seconds")
    mint.add_argument("--origin", action="append", dest="origins")
    verify = commands.add_parser("verify", help="verify a delivery: the raw body on stdin; print its payload")
    verify.add_argument("--secret", required=True)
    verify.add_argument("--headers", required=True, help="the request's headers as a JSON object")
    verify.add_argument("--now", type=int, help="the receiver's clock, Unix seconds (default now)")
    args = parser.parse_args(argv)

    if args.command == "mint":
        budget = {"ai": args.ai, "compute": args.compute, "window": args.window}
        print(mint_user_token(os.environ["PROJECT_ID"], os.environ["PROJECT_SECRET"], args.user, budget, args.expires_in, args.origins))
        return 0
    try:
        payload = verify_webhook(sys.stdin.buffer.read(), json.loads(args.headers), args.secret, now=args.now)
    except WebhookVerificationError as err:
        print(f"{err.code}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(payload, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

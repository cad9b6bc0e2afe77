#!/usr/bin/env python3
"""A small OpenID Connect identity provider for the test Kafka's OIDC listener.

    oidc_provider.py PORT RSA_KEY_PEM

Serves on 127.0.0.1:PORT:
  GET  /jwks   the JSON Web Key Set Kafka's OAuthBearerValidatorCallbackHandler verifies with
  POST /token  the client-credentials grant (RFC 6749 4.4), client authenticated with HTTP Basic
               or client_id/client_secret in the form: an RS256-signed JWT, one hour long,
               issued by http://127.0.0.1:PORT for audience "kafka".
Clients: "mirror" (secret "oidc-secret"), and "outsider" (secret "outsider-secret") whose
tokens name audience "elsewhere", which the broker must refuse. Signing uses the openssl command
(no Python package needed).
"""
import base64
import json
import subprocess
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
KEY = sys.argv[2]
KID = "kmirror-test-idp"
ISSUER = f"http://127.0.0.1:{PORT}"
CLIENTS = {"mirror": ("oidc-secret", "kafka"), "outsider": ("outsider-secret", "elsewhere")}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwks() -> dict:
    out = subprocess.run(["openssl", "rsa", "-in", KEY, "-noout", "-modulus"],
                         capture_output=True, check=True, text=True).stdout
    modulus = bytes.fromhex(out.strip().split("=", 1)[1])
    exponent = (65537).to_bytes(3, "big")
    return {"keys": [{"kty": "RSA", "kid": KID, "use": "sig", "alg": "RS256",
                      "n": b64url(modulus), "e": b64url(exponent)}]}


def token(client: str, audience: str, scope: str) -> str:
    now = int(time.time())
    header = b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": KID}).encode())
    claims = {"iss": ISSUER, "sub": client, "aud": audience, "iat": now, "exp": now + 3600}
    if scope:
        claims["scope"] = scope
    payload = b64url(json.dumps(claims).encode())
    signed = f"{header}.{payload}".encode()
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", KEY], input=signed,
                               capture_output=True, check=True).stdout
    return f"{header}.{payload}.{b64url(signature)}"


KEYS = json.dumps(jwks()).encode()


class Provider(BaseHTTPRequestHandler):
    def answer(self, status: int, body: dict | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/jwks":
            self.answer(200, KEYS)
        else:
            self.answer(404, {"error": "not_found"})

    def do_POST(self) -> None:
        if self.path != "/token":
            self.answer(404, {"error": "not_found"})
            return
        length = int(self.headers.get("Content-Length", "0"))
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        client = form.get("client_id", [""])[0]
        secret = form.get("client_secret", [""])[0]
        basic = self.headers.get("Authorization", "")
        if basic.startswith("Basic "):
            pair = base64.b64decode(basic[6:]).decode()
            client, _, secret = pair.partition(":")
            client, secret = urllib.parse.unquote_plus(client), urllib.parse.unquote_plus(secret)
        if form.get("grant_type", [""])[0] != "client_credentials":
            self.answer(400, {"error": "unsupported_grant_type"})
            return
        known = CLIENTS.get(client)
        if known is None or known[0] != secret:
            self.answer(401, {"error": "invalid_client"})
            return
        scope = form.get("scope", [""])[0]
        self.answer(200, {"access_token": token(client, known[1], scope),
                          "token_type": "Bearer", "expires_in": 3600})

    def log_message(self, *args) -> None:
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Provider).serve_forever()

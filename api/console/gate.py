"""The console's front door: sign-in and sign-out, the session cookie, CSRF, static files and
the headers every `/ui` answer carries.

An ASGI layer inside the audit middleware (every request here is on record) and outside the
token check: a signed-in browser's cookie becomes the `Authorization` header the token check
and the routes already understand, so the console authenticates exactly as the API does.

- The cookie holds an opaque random session id (api/console_sessions.py), never the token:
  the token stays on the server, in the session, and is checked again on every page (a
  revoked or expired token ends the session); signing out deletes the session, so the
  cookie is worthless afterwards. `HttpOnly` (no script reads it), `SameSite=Strict` (no
  other site's page sends it), `Secure` over TLS, path `/ui`.
- Failed sign-ins are limited per client address and per attempted identity
  (api/console/limits.py): past the limit, 429 with `Retry-After`, on record.
- The only POSTs are the sign-in, the sign-out and the policy-impact run (an admin act,
  pages.py, which checks its form with `checked_form`). Each must carry the CSRF value of
  the `lakegate_csrf` cookie in its form (double submit; another origin can neither read
  the cookie nor set it) and, when the browser says where it comes from (`Origin`,
  `Sec-Fetch-Site`), come from this origin. Everything else is a GET that reads.
- Every answer under `/ui` says `Cache-Control: no-store` and carries a strict content
  security policy (scripts from this server only; no frames).
"""

from __future__ import annotations

import hmac
import secrets
from http.cookies import SimpleCookie
from importlib.resources import files
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import Unauthenticated
from api.caller import AUDIT_KEY, RequestAudit
from api.console.limits import SignInLimiter
from api.console.provider_signin import ProviderSignIn
from api.console.render import render
from api.console_sessions import ConsoleSession

if TYPE_CHECKING:
    from api.deps import Service

PREFIX = "/ui"
SESSION = "lakegate_session"
CSRF = "lakegate_csrf"
STATE = "lakegate_signin_state"  # a provider sign-in under way (the OAuth `state`)
CALLBACK = "/ui/signin/callback"
MAX_FORM = 8192  # bytes: a token and a CSRF value
PLOTLY = f"{PREFIX}/static/plotly.min.js"
STATIC = {
    f"{PREFIX}/static/console.css": ("console.css", "text/css; charset=utf-8"),
    f"{PREFIX}/static/console.js": ("console.js", "text/javascript; charset=utf-8"),
}
HEADERS = [
    (b"cache-control", b"no-store"),
    (b"pragma", b"no-cache"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # no-referrer would make Origin "null"
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        b"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
        b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
]


def cookies(scope: Scope) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    for k, v in scope.get("headers") or ():
        if k == b"cookie":
            try:
                jar.load(v.decode("latin-1"))
            except Exception:  # a malformed cookie header is no cookie
                return {}
    return {k: m.value for k, m in jar.items()}


def claimed_identity(token: str) -> str | None:
    """Who a signed token (`user.expiry.signature`) names, for the per-identity sign-in
    limit; None for a random token, which names no one."""
    parts = token.rsplit(".", 2)
    return f"user:{parts[0].lower()[:128]}" if len(parts) == 3 and parts[0] else None


class ConsoleGate:
    """Serves `/ui/signin`, `/ui/signout` and `/ui/static/*`; turns the session cookie into
    its session's bearer token for the other `/ui` pages (a missing, unknown or expired
    session, or a token no longer accepted, goes to the sign-in page)."""

    def __init__(
        self, app: ASGIApp, service: Service, limiter: SignInLimiter | None = None
    ) -> None:
        self.app = app
        self.service = service
        self.sessions = service.console_sessions
        self.limiter = limiter or SignInLimiter()
        self._plotly: bytes | None = None
        console = service.lg.config.identity.console
        # the provider sign-in (issue 37): only when identity.console names a provider
        self.provider = None if console is None else ProviderSignIn(console, service.auth)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or not (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.app(scope, receive, send)
            return
        send = _with_headers(send, static=path.startswith(f"{PREFIX}/static/"))
        rec: RequestAudit = scope[AUDIT_KEY]
        method = scope["method"]
        if path in STATIC or path == PLOTLY:
            rec.cmd = "consoleStatic"
            await self._static(path)(scope, receive, send)
            return
        if path == f"{PREFIX}/signin":
            rec.cmd = "consoleSignIn"
            response = await (
                self._sign_in(scope, receive) if method == "POST" else self._form(scope)
            )
            await response(scope, receive, send)
            return
        if path == f"{PREFIX}/signin/provider" and method == "GET":
            rec.cmd = "consoleSignInProvider"
            await (await self._provider_start(scope))(scope, receive, send)
            return
        if path == CALLBACK and method == "GET":
            rec.cmd = "consoleSignIn"
            await (await self._provider_finish(scope))(scope, receive, send)
            return
        if path == f"{PREFIX}/signout" and method == "POST":
            rec.cmd = "consoleSignOut"
            await (await self._sign_out(scope, receive))(scope, receive, send)
            return
        jar = cookies(scope)
        has_header = any(k == b"authorization" for k, _ in scope.get("headers") or ())
        if not has_header:
            session_id = jar.get(SESSION, "")
            session = self.sessions.get(session_id)
            try:
                if session is None:
                    raise Unauthenticated("not signed in (no session, or it ended)")
                token = await self._bearer(session)
            except Unauthenticated as e:
                if session is not None:  # the token was revoked or expired: so is the session
                    self.sessions.close(session_id)
                    rec.user = session.user
                rec.cmd, rec.allowed, rec.reason = "consolePage", False, f"console: {e}"
                response = RedirectResponse(f"{PREFIX}/signin", 303)
                if SESSION in jar:
                    _clear(response, SESSION, scope)
                await response(scope, receive, send)
                return
            headers = [h for h in scope.get("headers") or () if h[0] != b"authorization"]
            scope = {**scope, "headers": [*headers, (b"authorization", f"Bearer {token}".encode())]}
        await self.app(scope, receive, send)

    async def _bearer(self, session: ConsoleSession) -> str:
        """The session's bearer, checked as every API request is; a provider sign-in's
        expired access token is renewed once with its refresh token (which is when the
        provider's group changes reach a signed-in console)."""
        try:
            self.service.auth.authenticate(f"Bearer {session.bearer}")
            return session.bearer
        except Unauthenticated as e:
            if self.provider is None or session.refresh is None or "expired" not in str(e):
                raise
        fresh = await run_in_threadpool(self.provider.refresh, session.refresh, session.id_token)
        if fresh.principal.user != session.user:
            raise Unauthenticated("the renewed token names another user")
        session.bearer, session.refresh = fresh.access_token, fresh.refresh_token
        session.id_token = fresh.id_token
        return session.bearer

    # static ---------------------------------------------------------------------------------

    def _static(self, path: str) -> Response:
        if path == PLOTLY:
            if self._plotly is None:
                from plotly.offline import get_plotlyjs

                self._plotly = get_plotlyjs().encode()
            return Response(self._plotly, media_type="text/javascript; charset=utf-8")
        name, kind = STATIC[path]
        return Response(files("api.console").joinpath("static", name).read_bytes(), media_type=kind)

    # sign-in and sign-out -------------------------------------------------------------------

    async def _form(self, scope: Scope, error: str | None = None, status: int = 200) -> Response:
        value = secrets.token_urlsafe(32)
        html = render(
            "signin.html",
            {
                "title": "Sign in",
                "csrf": value,
                "error": error,
                "user": None,
                "provider": self.provider is not None,
            },
        )
        response = HTMLResponse(html, status)
        _set(response, CSRF, value, scope)
        return response

    async def _sign_in(self, scope: Scope, receive: Receive) -> Response:
        form = await checked_form(scope, receive)
        rec: RequestAudit = scope[AUDIT_KEY]
        if isinstance(form, str):
            rec.reason = form
            return await self._form(scope, form, 403)
        token = form.get("token", "").strip()
        ip = rec.ip
        identity = claimed_identity(token) if len(token) <= 4096 else None
        wait = self.limiter.retry_after(ip, identity)
        if wait:
            rec.allowed = False
            rec.reason = "console sign-in: too many failed sign-ins; refused without a check"
            response = await self._form(
                scope, f"Too many failed sign-ins. Try again in {wait} seconds.", 429
            )
            response.headers["Retry-After"] = str(wait)
            return response
        try:
            if not token or len(token) > 4096 or not token.isprintable():
                raise Unauthenticated("invalid token")
            principal = self.service.auth.authenticate(f"Bearer {token}")
        except Unauthenticated as e:
            self.limiter.failed(ip, identity)
            rec.allowed = False
            rec.reason = f"console sign-in: {e}"
            return await self._form(scope, "That token was not accepted.", 401)
        rec.user = principal.user
        old = cookies(scope).get(SESSION)
        if old:
            self.sessions.close(old)  # a new sign-in replaces this browser's session
        response = RedirectResponse(f"{PREFIX}/catalog", 303)
        session_id = self.sessions.open(principal, token, expires_at=principal.expires)
        _set(response, SESSION, session_id, scope)
        _set(response, CSRF, secrets.token_urlsafe(32), scope)  # a new one per session
        return response

    async def _provider_start(self, scope: Scope) -> Response:
        """To the provider's authorization endpoint, the sign-in's state in a cookie."""
        if self.provider is None:
            return await self._form(scope, "No identity provider is configured.", 404)
        rec: RequestAudit = scope[AUDIT_KEY]
        try:
            url, state = await run_in_threadpool(self.provider.start, _callback_url(scope))
        except Unauthenticated as e:
            rec.allowed, rec.reason = False, f"console sign-in: {e}"
            return await self._form(scope, "The identity provider cannot be reached.", 503)
        response = RedirectResponse(url, 303)
        # Lax, not Strict: the provider's redirect back is a navigation from its site
        _set(response, STATE, state, scope, samesite="lax")
        return response

    async def _provider_finish(self, scope: Scope) -> Response:
        """The provider's redirect back: a session for the user its tokens name."""
        rec: RequestAudit = scope[AUDIT_KEY]
        if self.provider is None:
            return await self._form(scope, "No identity provider is configured.", 404)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        jar = cookies(scope)
        ip = rec.ip
        wait = self.limiter.retry_after(ip, None)
        if wait:
            rec.allowed, rec.reason = False, "console sign-in: too many failed sign-ins"
            response = await self._form(
                scope, f"Too many failed sign-ins. Try again in {wait} seconds.", 429
            )
            response.headers["Retry-After"] = str(wait)
            return response
        try:
            if "error" in query:
                raise Unauthenticated("the identity provider refused the sign-in")
            state, code = query.get("state", ""), query.get("code", "")
            if not state or not code or len(state) > 256 or len(code) > 4096:
                raise Unauthenticated("sign-in refused: the callback has no state or code")
            tokens = await run_in_threadpool(self.provider.finish, state, code, jar.get(STATE))
        except Unauthenticated as e:
            self.limiter.failed(ip, None)
            rec.allowed, rec.reason = False, f"console sign-in: {e}"
            response = await self._form(scope, "The sign-in with the provider failed.", 401)
            _clear(response, STATE, scope, samesite="lax")
            return response
        principal = tokens.principal
        rec.user, rec.auth, rec.claims = principal.user, principal.audit_method, principal.claims
        old = jar.get(SESSION)
        if old:
            self.sessions.close(old)
        session_id = self.sessions.open(
            principal, tokens.access_token, refresh=tokens.refresh_token, id_token=tokens.id_token
        )
        # a page, not a redirect: the navigation that started at the provider's site would
        # not carry the SameSite=Strict session cookie through a redirect
        response = HTMLResponse(
            render("signed_in.html", {"title": "Signed in", "user": None, "who": principal.user}),
            200,
        )
        _set(response, SESSION, session_id, scope)
        _set(response, CSRF, secrets.token_urlsafe(32), scope)
        _clear(response, STATE, scope, samesite="lax")
        return response

    async def _sign_out(self, scope: Scope, receive: Receive) -> Response:
        form = await checked_form(scope, receive)
        rec: RequestAudit = scope[AUDIT_KEY]
        if isinstance(form, str):
            rec.reason = form
            return HTMLResponse(
                render("refused.html", {"title": "Request refused", "reason": form, "user": None}),
                403,
            )
        ended = self.sessions.close(cookies(scope).get(SESSION, ""))
        if ended is not None:  # signing out needs no valid token, only the session
            rec.user = ended.user
            if ended.refresh is not None and self.provider is not None:
                await run_in_threadpool(self.provider.revoke, ended.refresh)
        response = RedirectResponse(f"{PREFIX}/signin", 303)
        _clear(response, SESSION, scope)
        _clear(response, CSRF, scope)
        return response


async def checked_form(
    scope: Scope, receive: Receive, *, max_bytes: int = MAX_FORM, max_fields: int = 4
) -> dict[str, str] | str:
    """The posted form, or why it is refused (cross-origin, no CSRF match, too large)."""
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or ()}
    own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
    origin = headers.get("origin")
    if origin is not None and origin != own:
        return "request refused: it comes from another origin"
    if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return "request refused: it comes from another site"
    if int(headers.get("content-length") or max_bytes + 1) > max_bytes:
        return "request refused: form missing or too large"
    request = Request(scope, receive)
    try:
        form = await request.form(max_files=0, max_fields=max_fields)
    except Exception:  # not a form: refused, whatever it was
        return "request refused: not a form"
    values = {k: v for k, v in form.items() if isinstance(v, str)}
    expected = cookies(scope).get(CSRF, "")
    given = values.get("csrf", "")
    if not expected or not hmac.compare_digest(expected.encode(), given.encode()):
        return "request refused: the CSRF token of the form does not match (reload the page)"
    return values


def _set(
    response: Response,
    name: str,
    value: str,
    scope: Scope,
    samesite: Literal["strict", "lax"] = "strict",
) -> None:
    response.set_cookie(
        name,
        value,
        path=PREFIX,
        httponly=True,
        samesite=samesite,
        secure=scope.get("scheme") == "https",
    )


def _clear(
    response: Response, name: str, scope: Scope, samesite: Literal["strict", "lax"] = "strict"
) -> None:
    response.delete_cookie(
        name, path=PREFIX, httponly=True, samesite=samesite, secure=scope.get("scheme") == "https"
    )


def _callback_url(scope: Scope) -> str:
    """Where the provider sends the browser back: this server's callback, as the browser
    addressed it (the provider accepts only the redirect URIs registered for the client)."""
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or ()}
    return f"{scope.get('scheme', 'http')}://{headers.get('host', '')}{CALLBACK}"


def _with_headers(send: Send, *, static: bool) -> Send:
    """Adds the console's headers to the answer (static files may be cached a day)."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            extra = HEADERS
            if static:
                extra = [(b"cache-control", b"private, max-age=86400"), *HEADERS[2:]]
            names = {k for k, _ in extra}
            kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
            message = {**message, "headers": [*kept, *extra]}
        await send(message)

    return wrapped

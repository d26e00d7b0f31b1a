"""SCIM 2.0 provisioning at `/scim/v2` (RFC 7643/7644; issue 37): the organisation's
identity provider (Okta, Entra ID, Keycloak) creates, changes, deactivates and deletes users
and groups in Lakegate's directory (catalog/directory.py).

An ASGI layer inside the audit middleware (every SCIM call has its audit line, user `scim`,
cmd `scimCreateUser` ...) and outside the users' token check: only the SCIM client's own
bearer tokens (`identity.scim.tokens`, their SHA-256, compared in constant time) are
accepted here, never a user's token, and a SCIM token is no user token anywhere else. Without
`identity.scim` the prefix answers 404.

Resources, list responses, PATCH operations, errors and filters are scim2-models' (RFC
7644 §3.4.2.2 filters parsed and matched by it); this module only checks what Lakegate
accepts: user names by governance.identity's rule (400 invalidValue otherwise), filters over
the attributes stored (userName, externalId, displayName, active, emails.value, id; for
groups displayName, externalId, id, members.value) with eq ne co sw ew pr and/or/not (else
400 invalidFilter: never a full listing), at most `MAX_COUNT` results a page and
`MAX_BODY` bytes a request. Deactivating (`active: false`) or deleting a user refuses its
next authentication everywhere (api/authenticator.py) and ends its sessions
(catalog/directory.py's subscribers: `Service.on_deprovision`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from scim2_models import (
    URN,
    Context,
    Error,
    Group,
    GroupMember,
    ListResponse,
    Meta,
    PatchOp,
    ResourceType,
    ResponseParameters,
    Schema,
    SCIMException,
    ScimFilter,
    ScimPolicy,
    ServiceProviderConfig,
    User,
)
from scim2_models.path.expressions import (
    AttrPath,
    CompareOperator,
    Comparison,
    FilterNode,
    LogicalExpr,
    Not,
    Present,
    ValuePath,
)
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from api.auth import bearer
from api.caller import AUDIT_KEY, RequestAudit
from catalog.directory import (
    DirectoryConflict,
    DirectoryError,
    DirectoryGroup,
    DirectoryNotFound,
    DirectoryStale,
    DirectoryStore,
    DirectoryUser,
)
from governance.errors import AuditUnavailable
from governance.identity import InvalidName, canonical_user

if TYPE_CHECKING:
    from api.deps import Service

PREFIX = "/scim/v2"
MEDIA = "application/scim+json"
MAX_BODY = 1 << 20  # bytes: a group replaced with some thousands of members
MAX_COUNT = 200  # resources a page (ServiceProviderConfig filter.maxResults)
DEFAULT_COUNT = 100
MAX_FILTER = 1000  # characters of a filter
MAX_TEXT = 256  # characters of externalId, displayName, an e-mail address
MAX_EMAILS = 10
SCIM_USER = "scim"  # the audit line's user for every authenticated SCIM call

_FILTERABLE = {
    "User": {"id", "username", "externalid", "displayname", "active", "emails", "emails.value"},
    "Group": {"id", "displayname", "externalid", "members", "members.value"},
}
_KEPT = ("userName", "externalId", "displayName", "active", "emails")  # columns of their own
_OPERATORS = {
    CompareOperator.eq,
    CompareOperator.ne,
    CompareOperator.co,
    CompareOperator.sw,
    CompareOperator.ew,
}
#: what Microsoft Entra ID sends (scim2-models' documented leniencies): a `remove` whose
#: value lists the members to remove, and `emails[type eq "work"].value` on a user with no
#: work address (the entry is made). Nothing else departs from RFC 7644.
PROVIDERS = ScimPolicy(
    remove_value_as_filter=ScimPolicy.RemoveValue.apply,
    unmatched_path_filter=ScimPolicy.UnmatchedPathFilter.create,
)
_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")  # uuid4s
_ETAG = re.compile(r'^(?:W/)?"(\d{1,18})"$')


class ScimError(Exception):
    """One SCIM error answer: status, scimType (or None) and one line."""

    def __init__(self, status: int, detail: str, scim_type: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.scim_type = status, detail, scim_type


def _from_exception(e: SCIMException | ValidationError) -> ScimError:
    if isinstance(e, SCIMException):
        error = e.to_error()
    else:
        errors = Error.from_validation_errors(e.errors())
        error = errors[0] if errors else Error(status=400, detail="invalid request")
    detail = (error.detail or "invalid request").splitlines()[0][:300]
    return ScimError(int(error.status or 400), detail, error.scim_type or None)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _iso(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _etag(version: int) -> str:
    return f'W/"{version}"'


class ScimService:
    """The SCIM operations over one directory. A user deactivated or deleted here reaches
    `Service.deprovisioned` through the directory's own refresh (as one deprovisioned by
    another server does): tokens forgotten, `Service.on_deprovision` hooks called."""

    def __init__(self, directory: DirectoryStore, tokens: tuple[str, ...]) -> None:
        self.directory = directory
        self.tokens = tokens

    def authorised(self, header: str | None) -> bool:
        """The header carries one of the SCIM client's tokens (constant-time compare)."""
        try:
            digest = _digest(bearer(header))
        except Exception:
            return False
        found = False
        for token in self.tokens:
            found |= hmac.compare_digest(digest, token)
        return found

    # users --------------------------------------------------------------------------------

    def user_resource(self, u: DirectoryUser, base: str) -> User:
        user = User.model_validate(
            {
                **u.attributes,
                "userName": u.user_name,
                "externalId": u.external_id,
                "displayName": u.display_name,
                "active": u.active,
                "emails": list(u.emails) or None,
            }
        )
        user.id = u.id
        user.meta = Meta(
            resource_type="User",
            created=_iso(u.created),
            last_modified=_iso(u.last_modified),
            version=_etag(u.version),
            location=f"{base}/Users/{u.id}",
        )
        return user

    @staticmethod
    def user_fields(user: User) -> dict[str, Any]:
        """What Lakegate keeps of a SCIM user, checked: the canonical user name, bounded
        texts and e-mail addresses."""
        try:
            name = canonical_user(user.user_name)
        except InvalidName as e:
            raise ScimError(400, str(e), "invalidValue") from None
        emails = [e.model_dump(exclude_none=True, mode="json") for e in user.emails or ()]
        # the rest of the resource, given back as sent (name, title, phoneNumbers ...)
        rest = user.model_dump(mode="json", by_alias=True, exclude_none=True, scim_ctx=None)
        for key in ("schemas", "id", "meta", "password", "groups", *_KEPT):
            rest.pop(key, None)  # a password is never kept; groups are the Groups' word
        if len(emails) > MAX_EMAILS:
            raise ScimError(400, f"at most {MAX_EMAILS} emails a user", "invalidValue")
        for key, value in (("externalId", user.external_id), ("displayName", user.display_name)):
            if value is not None and len(value) > MAX_TEXT:
                raise ScimError(400, f"{key} is over {MAX_TEXT} characters", "invalidValue")
        for e in emails:
            if len(str(e.get("value", ""))) > MAX_TEXT:
                raise ScimError(400, f"an email is over {MAX_TEXT} characters", "invalidValue")
        return {
            "user_name": name,
            "external_id": user.external_id,
            "display_name": user.display_name,
            "emails": [
                {k: e[k] for k in ("value", "type", "primary", "display") if k in e} for e in emails
            ],
            "active": True if user.active is None else bool(user.active),
            "attributes": rest,
        }

    def create_user(self, payload: Any) -> DirectoryUser:
        user = _validate(User, payload, Context.RESOURCE_CREATION_REQUEST)
        fields = self.user_fields(user)
        try:
            return self.directory.create_user(
                fields.pop("user_name"),
                **fields,
            )
        except DirectoryConflict as e:
            raise ScimError(409, str(e), "uniqueness") from None

    def replace_user(
        self, user_id: str, fields: dict[str, Any], version: int | None
    ) -> DirectoryUser:
        try:
            return self.directory.replace_user(user_id, **fields, if_version=version)
        except DirectoryConflict as e:
            raise ScimError(409, str(e), "uniqueness") from None

    def put_user(self, user_id: str, payload: Any, version: int | None) -> DirectoryUser:
        user = _validate(User, payload, Context.RESOURCE_REPLACEMENT_REQUEST)
        self._existing_user(user_id)
        return self.replace_user(user_id, self.user_fields(user), version)

    def patch_user(
        self, user_id: str, payload: Any, version: int | None, base: str
    ) -> DirectoryUser:
        current = self.user_resource(self._existing_user(user_id), base)
        with PROVIDERS:
            patch = _validate(PatchOp[User], payload, Context.RESOURCE_PATCH_REQUEST)
            try:
                patch.patch(current)
            except (SCIMException, ValidationError) as e:
                raise _from_exception(e) from None
        return self.replace_user(user_id, self.user_fields(current), version)

    def delete_user(self, user_id: str, version: int | None) -> DirectoryUser:
        return self.directory.delete_user(user_id, if_version=version)

    def _existing_user(self, user_id: str) -> DirectoryUser:
        found = self.directory.get_user(user_id)
        if found is None:
            raise ScimError(404, f"no user with id {user_id}")
        return found

    # groups -------------------------------------------------------------------------------

    def group_resource(self, g: DirectoryGroup, base: str) -> Group:
        group = Group(
            display_name=g.display_name,
            external_id=g.external_id,
            members=[
                GroupMember(value=uid, display=name, type="User", ref=f"{base}/Users/{uid}")
                for uid, name in g.members
            ]
            or None,
        )
        group.id = g.id
        group.meta = Meta(
            resource_type="Group",
            created=_iso(g.created),
            last_modified=_iso(g.last_modified),
            version=_etag(g.version),
            location=f"{base}/Groups/{g.id}",
        )
        return group

    @staticmethod
    def group_fields(group: Group) -> dict[str, Any]:
        name = group.display_name
        if not name or len(name) > MAX_TEXT or any(ord(c) < 32 for c in name):
            raise ScimError(
                400, f"displayName must be 1 to {MAX_TEXT} printable characters", "invalidValue"
            )
        if group.external_id is not None and len(group.external_id) > MAX_TEXT:
            raise ScimError(400, f"externalId is over {MAX_TEXT} characters", "invalidValue")
        members = []
        for m in group.members or ():
            if m.type not in (None, "User"):
                raise ScimError(400, "group members are users (no nested groups)", "invalidValue")
            if not m.value:
                raise ScimError(400, "a group member has no value (user id)", "invalidValue")
            members.append(m.value)
        return {"display_name": name, "external_id": group.external_id, "member_ids": members}

    def create_group(self, payload: Any) -> DirectoryGroup:
        fields = self.group_fields(_validate(Group, payload, Context.RESOURCE_CREATION_REQUEST))
        try:
            return self.directory.create_group(fields.pop("display_name"), **fields)
        except DirectoryConflict as e:
            raise ScimError(409, str(e), "uniqueness") from None

    def replace_group(
        self, group_id: str, fields: dict[str, Any], version: int | None
    ) -> DirectoryGroup:
        try:
            return self.directory.replace_group(group_id, **fields, if_version=version)
        except DirectoryConflict as e:
            raise ScimError(409, str(e), "uniqueness") from None

    def put_group(self, group_id: str, payload: Any, version: int | None) -> DirectoryGroup:
        group = _validate(Group, payload, Context.RESOURCE_REPLACEMENT_REQUEST)
        self._existing_group(group_id)
        return self.replace_group(group_id, self.group_fields(group), version)

    def patch_group(
        self, group_id: str, payload: Any, version: int | None, base: str
    ) -> DirectoryGroup:
        current = self.group_resource(self._existing_group(group_id), base)
        with PROVIDERS:
            patch = _validate(PatchOp[Group], payload, Context.RESOURCE_PATCH_REQUEST)
            try:
                patch.patch(current)
            except (SCIMException, ValidationError) as e:
                raise _from_exception(e) from None
        return self.replace_group(group_id, self.group_fields(current), version)

    def _existing_group(self, group_id: str) -> DirectoryGroup:
        found = self.directory.get_group(group_id)
        if found is None:
            raise ScimError(404, f"no group with id {group_id}")
        return found

    # lists --------------------------------------------------------------------------------

    def search(self, kind: str, query: dict[str, str], base: str) -> dict[str, Any]:
        start = _int(query.get("startIndex"), "startIndex", 1)
        count = _int(query.get("count"), "count", DEFAULT_COUNT)
        start, count = max(start, 1), min(max(count, 0), MAX_COUNT)
        text = query.get("filter")
        model: Any = User if kind == "User" else Group
        resources: list[Any]
        if text is None:
            found = self._all(kind)
            resources = [self._resource(kind, r, base) for r in found]
        else:
            flt = _filter(model, kind, text)
            quick = _user_name_eq(flt.ast) if kind == "User" else None
            if quick is not None:
                one = self.directory.find_user(quick)
                candidates = [one] if one is not None else []
            else:
                candidates = self._all(kind)
            resources = [
                r for r in (self._resource(kind, c, base) for c in candidates) if flt.match(r)
            ]
        page = resources[start - 1 : start - 1 + count]
        params = _response_parameters(query)
        listed = ListResponse[model](  # type: ignore[valid-type]
            total_results=len(resources),
            start_index=start,
            items_per_page=len(page),
            resources=page,
        )
        return listed.model_dump(scim_ctx=Context.SEARCH_RESPONSE, response_parameters=params)

    def _all(self, kind: str) -> list[Any]:
        return self.directory.list_users() if kind == "User" else self.directory.list_groups()

    def _resource(self, kind: str, row: Any, base: str) -> Any:
        return self.user_resource(row, base) if kind == "User" else self.group_resource(row, base)


def _validate(model: Any, payload: Any, ctx: Context) -> Any:
    if not isinstance(payload, dict):
        raise ScimError(400, "the body must be a JSON object", "invalidSyntax")
    try:
        return model.model_validate(payload, scim_ctx=ctx)
    except (ValidationError, SCIMException) as e:
        raise _from_exception(e) from None


def _search_request(payload: Any) -> dict[str, str]:
    """A SearchRequest body as the query parameters a GET would carry."""
    if not isinstance(payload, dict):
        raise ScimError(400, "the body must be a JSON object", "invalidSyntax")
    query: dict[str, str] = {}
    for key in ("filter", "startIndex", "count"):
        value = payload.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise ScimError(400, f"{key} must be a string or an integer", "invalidValue")
            query[key] = str(value)
    for key in ("attributes", "excludedAttributes"):
        value = payload.get(key)
        if value is not None:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ScimError(400, f"{key} must be a list of attribute names", "invalidValue")
            query[key] = ",".join(value)
    return query


def _int(raw: str | None, name: str, default: int) -> int:
    if raw is None or raw == "":
        return default
    if not re.fullmatch(r"-?\d{1,9}", raw):
        raise ScimError(400, f"{name} must be an integer", "invalidValue")
    return int(raw)


def _response_parameters(query: dict[str, str]) -> ResponseParameters | None:
    raw = {k: query[k] for k in ("attributes", "excludedAttributes") if k in query}
    if not raw:
        return None
    try:
        return ResponseParameters.model_validate(raw)
    except (ValidationError, SCIMException) as e:
        raise _from_exception(e) from None


def _filter(model: Any, kind: str, text: str) -> ScimFilter[Any]:
    """The parsed filter, refused (400 invalidFilter) unless every attribute and operator
    is one Lakegate answers."""
    if len(text) > MAX_FILTER:
        raise ScimError(400, f"the filter is over {MAX_FILTER} characters", "invalidFilter")
    try:
        flt = ScimFilter[model](text)
    except (SCIMException, ValidationError) as e:
        raise ScimError(
            400, f"invalid filter: {_from_exception(e).detail}", "invalidFilter"
        ) from None
    except Exception:
        raise ScimError(400, "invalid filter", "invalidFilter") from None
    _check(flt.ast, kind, None)
    return flt


def _attr(path: AttrPath, outer: str | None) -> str:
    name = path.attr.lower()
    if path.sub_attr:
        name = f"{name}.{path.sub_attr.lower()}"
    if outer is not None:
        name = f"{outer}.{name}"
    return name


def _check(node: FilterNode, kind: str, outer: str | None) -> None:
    allowed = _FILTERABLE[kind]
    if isinstance(node, LogicalExpr):
        for term in node.terms:
            _check(term, kind, outer)
    elif isinstance(node, Not):
        _check(node.expr, kind, outer)
    elif isinstance(node, Present | Comparison):
        name = _attr(node.attr_path, outer)
        if node.attr_path.uri or name not in allowed or name in ("emails", "members"):
            raise ScimError(400, f"filtering on {name} is not supported", "invalidFilter")
        if isinstance(node, Comparison) and node.op not in _OPERATORS:
            raise ScimError(400, f"the operator {node.op} is not supported", "invalidFilter")
    elif isinstance(node, ValuePath):
        name = _attr(node.attr_path, outer)
        if node.attr_path.uri or name not in ("emails", "members") or node.sub_attr:
            raise ScimError(400, f"filtering on {name}[...] is not supported", "invalidFilter")
        _check(node.val_filter, kind, name)
    else:
        raise ScimError(400, "this filter is not supported", "invalidFilter")


def _user_name_eq(node: FilterNode) -> str | None:
    """`userName eq "x"` (what a provider sends before creating a user): its canonical name,
    looked up directly; "" when x is no valid name (no user has it)."""
    if (
        isinstance(node, Comparison)
        and node.op == CompareOperator.eq
        and node.attr_path.attr.lower() == "username"
        and not node.attr_path.sub_attr
        and not node.attr_path.uri
        and isinstance(node.value, str)
    ):
        try:
            return canonical_user(node.value)
        except InvalidName:
            return ""
    return None


# the discovery documents (RFC 7644 §4) ----------------------------------------------------


def _service_provider_config() -> dict[str, Any]:
    spc = ServiceProviderConfig.model_validate(
        {
            "documentationUri": "https://lakegate.dev/identity/#scim-provisioning",
            "patch": {"supported": True},
            "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
            "filter": {"supported": True, "maxResults": MAX_COUNT},
            "changePassword": {"supported": False},
            "sort": {"supported": False},
            "etag": {"supported": True},
            "authenticationSchemes": [
                {
                    "type": "oauthbearertoken",
                    "name": "Bearer token",
                    "description": "a token whose SHA-256 is listed in identity.scim.tokens",
                    "primary": True,
                }
            ],
        }
    )
    return spc.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE)


def _resource_types(base: str) -> list[dict[str, Any]]:
    out = []
    for model in (User, Group):
        rt = ResourceType.from_resource(model)
        rt.meta = Meta(resource_type="ResourceType", location=f"{base}/ResourceTypes/{rt.id}")
        out.append(rt.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE))
    return out


def _schemas(base: str) -> list[dict[str, Any]]:
    out = []
    for model in (User, Group):
        schema: Schema = model.to_schema()
        schema.meta = Meta(resource_type="Schema", location=f"{base}/Schemas/{schema.id}")
        out.append(schema.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE))
    return out


def _listed(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schemas": [str(URN("urn:ietf:params:scim:api:messages:2.0:ListResponse"))],
        "totalResults": len(items),
        "startIndex": 1,
        "itemsPerPage": len(items),
        "Resources": items,
    }


# the ASGI layer ---------------------------------------------------------------------------


class ScimGate:
    """Serves `/scim/v2` with the SCIM client's tokens; passes every other path on."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service
        scim = service.lg.config.identity.scim
        self.scim = None if scim is None else ScimService(service.directory, scim.tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or not (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.app(scope, receive, send)
            return
        rec: RequestAudit = scope[AUDIT_KEY]
        method: str = scope["method"]
        parts = [p for p in path[len(PREFIX) :].split("/") if p]
        rec.cmd = _command(method, parts)
        try:
            if self.scim is None:
                raise ScimError(404, "SCIM provisioning is not configured (identity.scim)")
            header = next((v for k, v in scope.get("headers") or () if k == b"authorization"), None)
            if not self.scim.authorised(header.decode("latin-1") if header else None):
                raise ScimError(401, "a SCIM client token is required (identity.scim.tokens)")
            rec.user, rec.auth = SCIM_USER, "TOKEN"
            status, payload, headers = await self._route(scope, receive, method, parts, rec)
        except ScimError as e:
            status, payload, headers = e.status, _error(e), {}
            if e.status == 401:
                headers["www-authenticate"] = 'Bearer realm="scim"'
            rec.reason = e.detail
        except DirectoryStale as e:
            status, payload, headers = 412, _error(ScimError(412, str(e))), {}
            rec.reason = str(e)
        except DirectoryNotFound as e:
            status, payload, headers = 404, _error(ScimError(404, str(e))), {}
            rec.reason = str(e)
        except DirectoryError as e:
            status, payload, headers = 400, _error(ScimError(400, str(e), "invalidValue")), {}
            rec.reason = str(e)
        except AuditUnavailable as e:  # the intent line could not be written: nothing changed
            status, payload, headers = 503, _error(ScimError(503, str(e))), {}
            rec.reason = str(e)
        await _send(send, status, payload, headers)

    async def _route(
        self, scope: Scope, receive: Receive, method: str, parts: list[str], rec: RequestAudit
    ) -> tuple[int, Any, dict[str, str]]:
        assert self.scim is not None
        scim = self.scim
        base = _base(scope)
        query = _query(scope)
        if not parts:
            raise ScimError(404, "no such SCIM endpoint")
        head, rest = parts[0], parts[1:]
        discovery = head in ("ServiceProviderConfig", "ResourceTypes", "Schemas")
        if discovery and method != "GET":
            raise ScimError(405, f"only GET is allowed on /{head}")
        if head == "ServiceProviderConfig" and not rest:
            return 200, _service_provider_config(), {}
        if head in ("ResourceTypes", "Schemas") and len(rest) <= 1:
            items = _resource_types(base) if head == "ResourceTypes" else _schemas(base)
            if not rest:
                return 200, _listed(items), {}
            found = [i for i in items if i.get("id") == rest[0]]
            if not found:
                raise ScimError(404, f"no {head[:-1]} {rest[0]}")
            return 200, found[0], {}
        if head not in ("Users", "Groups") or len(rest) > 1:
            raise ScimError(404, "no such SCIM endpoint")
        kind = "User" if head == "Users" else "Group"
        version = _if_match(scope)
        if not rest:
            if method == "GET":
                return 200, await run_in_threadpool(scim.search, kind, query, base), {}
            if method == "POST":
                payload = await _body(receive, scope)
                await self._intent(rec)
                if kind == "User":
                    u = await run_in_threadpool(scim.create_user, payload)
                    rec.resource = f"scim:user:{u.user_name}"
                    return _one(201, scim.user_resource(u, base), u.version)
                g = await run_in_threadpool(scim.create_group, payload)
                rec.resource = f"scim:group:{g.id}"
                return _one(201, scim.group_resource(g, base), g.version)
            raise ScimError(405, f"{method} is not allowed on /{head}")
        rid = rest[0]
        if rid != ".search" and not _ID.match(rid):
            raise ScimError(404, f"no {kind.lower()} with this id")
        if rid == ".search":  # RFC 7644 §3.4.3: the query in a POSTed SearchRequest
            if method != "POST":
                raise ScimError(405, f"only POST is allowed on /{head}/.search")
            searched = _search_request(await _body(receive, scope))
            return 200, await run_in_threadpool(scim.search, kind, searched, base), {}
        if kind == "User":
            rec.resource = f"scim:userId:{rid}"
            if method == "GET":
                u = scim._existing_user(rid)
                return _one(200, scim.user_resource(u, base), u.version, query)
            if method == "DELETE":
                await self._intent(rec)
                gone = await run_in_threadpool(scim.delete_user, rid, version)
                rec.resource = f"scim:user:{gone.user_name}"
                return 204, None, {}
            if method in ("PUT", "PATCH"):
                payload = await _body(receive, scope)
                await self._intent(rec)
                if method == "PUT":
                    u = await run_in_threadpool(scim.put_user, rid, payload, version)
                else:
                    u = await run_in_threadpool(scim.patch_user, rid, payload, version, base)
                rec.resource = f"scim:user:{u.user_name}"
                return _one(200, scim.user_resource(u, base), u.version)
        else:
            rec.resource = f"scim:group:{rid}"
            if method == "GET":
                g = scim._existing_group(rid)
                return _one(200, scim.group_resource(g, base), g.version, query)
            if method == "DELETE":
                await self._intent(rec)
                await run_in_threadpool(scim.directory.delete_group, rid, if_version=version)
                return 204, None, {}
            if method in ("PUT", "PATCH"):
                payload = await _body(receive, scope)
                await self._intent(rec)
                if method == "PUT":
                    g = await run_in_threadpool(scim.put_group, rid, payload, version)
                else:
                    g = await run_in_threadpool(scim.patch_group, rid, payload, version, base)
                return _one(200, scim.group_resource(g, base), g.version)
        raise ScimError(405, f"{method} is not allowed on /{head}/{{id}}")

    async def _intent(self, rec: RequestAudit) -> None:
        """Audit before effect: the change's intent line, before the directory changes."""
        await run_in_threadpool(self.service.write_intent, rec)


_VERBS = {"GET": "Get", "POST": "Create", "PUT": "Replace", "PATCH": "Patch", "DELETE": "Delete"}


def _command(method: str, parts: list[str]) -> str:
    """The audit line's cmd: scimCreateUser, scimListGroups, scimGetServiceProviderConfig."""
    head = parts[0] if parts else ""
    if head in ("Users", "Groups"):
        noun = head[:-1]
        if len(parts) == 2 and parts[1] == ".search":
            return "scimSearch" + head
        if len(parts) == 1:
            return (
                "scimList" + head if method == "GET" else f"scim{_VERBS.get(method, 'Call')}{noun}"
            )
        return f"scim{_VERBS.get(method, 'Call')}{noun}"
    if head in ("ServiceProviderConfig", "ResourceTypes", "Schemas"):
        return "scimGet" + head
    return "scimUnknown"


def _one(
    status: int, resource: Any, version: int, query: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    params = _response_parameters(query or {})
    body = resource.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE, response_parameters=params)
    headers = {"etag": _etag(version)}
    if status == 201:
        headers["location"] = resource.meta.location
    return status, body, headers


def _error(e: ScimError) -> dict[str, Any]:
    error = Error(status=e.status, scim_type=e.scim_type, detail=e.detail)
    return error.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE)


def _if_match(scope: Scope) -> int | None:
    raw = next((v for k, v in scope.get("headers") or () if k == b"if-match"), None)
    if raw is None or raw.strip() == b"*":
        return None
    m = _ETAG.match(raw.decode("latin-1").strip())
    if m is None:
        raise ScimError(412, "If-Match must be an ETag this server gave")
    return int(m.group(1))


def _base(scope: Scope) -> str:
    host = next((v for k, v in scope.get("headers") or () if k == b"host"), b"localhost")
    scheme = scope.get("scheme", "http")
    return f"{scheme}://{host.decode('latin-1')}{PREFIX}"


def _query(scope: Scope) -> dict[str, str]:
    from urllib.parse import parse_qsl

    raw = (scope.get("query_string") or b"").decode("latin-1")
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, max_num_fields=20, strict_parsing=False)
    except ValueError:
        raise ScimError(400, "too many query parameters", "invalidValue") from None
    return dict(pairs)


async def _body(receive: Receive, scope: Scope) -> Any:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ScimError(400, "the client went away", "invalidSyntax")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise ScimError(413, f"the request body is over {MAX_BODY} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, RecursionError):
        raise ScimError(400, "the body is not JSON", "invalidSyntax") from None


async def _send(send: Send, status: int, payload: Any, headers: dict[str, str]) -> None:
    data = b"" if payload is None else json.dumps(payload).encode()
    raw = [(k.encode(), v.encode("latin-1")) for k, v in headers.items()]
    if payload is not None:
        raw += [(b"content-type", MEDIA.encode()), (b"content-length", str(len(data)).encode())]
    raw.append((b"cache-control", b"no-store"))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})

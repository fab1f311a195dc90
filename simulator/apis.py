"""The names the API server gives KubeVirt's kinds and labels: upstream, or Deckhouse's.

Deckhouse runs KubeVirt renamed (`src/kubevirt-rules/kubevirt_rules.go` in
deckhouse/virtualization): its API server serves group
`internal.virtualization.deckhouse.io`, kinds `InternalVirtualization<Kind>`, plurals
`internalvirtualization<plural>`, and labels, annotations and finalizers under
`kubevirt.io/`, `vm.kubevirt.io/` (and the other KubeVirt domains) moved under
`kubevirt.internal.virtualization.deckhouse.io/` and the like. KubeVirt itself keeps
speaking `kubevirt.io` through Deckhouse's rewriting proxy.

The simulator does the same: its store and actors keep KubeVirt's own names (they are
KubeVirt), and the HTTP layer renames every object on the way out and restores it on the
way in (objects, merge patches, JSON patches, label selectors), as the proxy does. With
`upstream` nothing is renamed. This module only renames; it never touches the store.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from nicplug.simulator.resources import ALL, NADS, Resource

ApiName = Literal["upstream", "deckhouse"]
API_NAMES: tuple[ApiName, ...] = ("upstream", "deckhouse")

KUBEVIRT_GROUP = "kubevirt.io"
RENAMED_GROUP = "internal.virtualization.deckhouse.io"
KIND_PREFIX = "InternalVirtualization"
PLURAL_PREFIX = "internalvirtualization"
SHORT_NAME_PREFIX = "intvirt"
CATEGORY = "intvirt"

_RENAMED_DOMAIN = "kubevirt." + RENAMED_GROUP
# (original, renamed) label/annotation key domains, as the rewriter's prefix rules list them
_LABEL_DOMAINS = (
    ("kubevirt.io", _RENAMED_DOMAIN),
    ("vm.kubevirt.io", "vm." + _RENAMED_DOMAIN),
    ("operator.kubevirt.io", "operator." + _RENAMED_DOMAIN),
    ("prometheus.kubevirt.io", "prometheus." + _RENAMED_DOMAIN),
)
_ANNOTATION_DOMAINS = (
    ("kubevirt.io", _RENAMED_DOMAIN),
    ("certificates.kubevirt.io", "certificates." + _RENAMED_DOMAIN),
)
_SELECTOR_KEY = re.compile(
    r"(?<![\w./-])((?:vm|operator|prometheus)\.)?kubevirt\."
    + re.escape(RENAMED_GROUP) + r"(?![\w.-])"
)

_UPSTREAM_KEY = re.compile(r"(?<![\w./-])(?:(?:vm|operator|prometheus)\.)?kubevirt\.io(?![\w.-])")
_UNSERVED = "unserved."

Json = dict[str, Any]
KeyMap = Callable[[str], str]


def _key_mapper(domains: tuple[tuple[str, str], ...], *, outward: bool) -> KeyMap:
    pairs = [(a, b) if outward else (b, a) for a, b in domains]

    def rename(key: str) -> str:
        domain, slash, rest = key.partition("/")
        for old, new in pairs:
            if domain == old:
                return new + slash + rest
        return key

    return rename


@dataclass(frozen=True, slots=True)
class ServedApi:
    """How the API server names the kinds of `resources.ALL` and their metadata."""

    name: ApiName
    nads: bool = True  # multus installed: its NetworkAttachmentDefinitions are served

    @property
    def renames(self) -> bool:
        return self.name == "deckhouse"

    # -- kinds -------------------------------------------------------------------------

    def served(self, res: Resource) -> Resource:
        """The face `res` shows clients: its group, kind, plural, short names."""
        if not self.renames or res.group != KUBEVIRT_GROUP:
            return res
        # Deckhouse's CRDs keep one short name each, and none for the KubeVirt CR
        # (`crds/embedded/`): `intvirtvm`, `intvirtvmi`.
        short = () if res.kind == "KubeVirt" else res.short_names[:1]
        return replace(
            res, group=RENAMED_GROUP, kind=KIND_PREFIX + res.kind,
            plural=PLURAL_PREFIX + res.plural,
            short_names=tuple(SHORT_NAME_PREFIX + s for s in short),
            categories=(CATEGORY,),
        )

    @property
    def all_served(self) -> tuple[Resource, ...]:
        return tuple(self.served(r) for r in ALL if self.nads or r is not NADS)

    def internal(self, group: str, version: str, plural: str) -> Resource | None:
        """The stored kind a public (group, version, plural) addresses, or None."""
        return next(
            (r for r in ALL
             if (self.nads or r is not NADS)
             and (s := self.served(r)).group == group and s.version == version
             and s.plural == plural),
            None,
        )

    def stored_path(self, path: str) -> str:
        """A request path in the store's names: `/apis/<renamed group>/v1/...` with the
        renamed plural back as KubeVirt names it; any other path as it is."""
        parts = path.split("/")
        if not self.renames or len(parts) < 5 or parts[1:3] != ["apis", RENAMED_GROUP]:
            return path
        parts[2] = KUBEVIRT_GROUP
        at = 6 if parts[4] == "namespaces" and len(parts) > 6 else 4
        if parts[at].startswith(PLURAL_PREFIX):
            parts[at] = parts[at][len(PLURAL_PREFIX):]
        return "/".join(parts)

    def _api_version(self, value: Any, *, outward: bool) -> Any:
        if not isinstance(value, str):
            return value
        old, new = (KUBEVIRT_GROUP, RENAMED_GROUP) if outward else (RENAMED_GROUP, KUBEVIRT_GROUP)
        group, slash, version = value.rpartition("/")
        return f"{new}/{version}" if slash and group == old else value

    def _kind(self, value: Any, api_version: Any, *, outward: bool) -> Any:
        group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
        if not isinstance(value, str):
            return value
        if outward and group == KUBEVIRT_GROUP:
            return KIND_PREFIX + value
        if not outward and group == RENAMED_GROUP and value.startswith(KIND_PREFIX):
            return value[len(KIND_PREFIX):]
        return value

    # -- objects -----------------------------------------------------------------------

    def outward(self, obj: Any) -> Any:
        """`obj` as clients see it (a new dict where anything changed; shared otherwise)."""
        return self._object(obj, outward=True) if self.renames else obj

    def inward(self, document: Any) -> Any:
        """A request body (object, merge patch or JSON patch) in the store's names."""
        if not self.renames:
            return document
        if isinstance(document, list):
            return [self._operation(op) for op in document]
        return self._object(document, outward=False)

    def inward_fields(self, selector: str | None) -> str | None:
        """A field selector in the store's names (fields are never renamed here)."""
        return selector

    def inward_selector(self, selector: str | None) -> str | None:
        """A label selector in the store's names. A key in KubeVirt's own domains
        matches nothing, as on a Deckhouse cluster where no stored label has one."""
        if not self.renames or not selector:
            return selector
        hidden = _UPSTREAM_KEY.sub(lambda m: _UNSERVED + m.group(0), selector)
        return _SELECTOR_KEY.sub(lambda m: (m.group(1) or "") + KUBEVIRT_GROUP, hidden)

    def _object(self, obj: Any, *, outward: bool) -> Any:
        if not isinstance(obj, dict):
            return obj
        out = dict(obj)
        if "apiVersion" in out:
            api_version = out["apiVersion"]
            out["apiVersion"] = self._api_version(api_version, outward=outward)
            if "kind" in out:
                out["kind"] = self._kind(out["kind"], api_version, outward=outward)
        if isinstance(out.get("metadata"), dict):
            out["metadata"] = self._metadata(out["metadata"], outward=outward)
        spec = out.get("spec")
        template = spec.get("template") if isinstance(spec, dict) else None
        if isinstance(template, dict) and isinstance(template.get("metadata"), dict):
            template = {**template, "metadata": self._metadata(template["metadata"],
                                                               outward=outward)}
            out["spec"] = {**obj["spec"], "template": template}
        involved = out.get("involvedObject")
        if isinstance(involved, dict):
            out["involvedObject"] = self._object(involved, outward=outward)
        if isinstance(out.get("items"), list):
            out["items"] = [self._object(i, outward=outward) for i in out["items"]]
        return out

    def _metadata(self, meta: Json, *, outward: bool) -> Json:
        out = dict(meta)
        labels = _key_mapper(_LABEL_DOMAINS, outward=outward)
        annotations = _key_mapper(_ANNOTATION_DOMAINS, outward=outward)
        for field, rename in (("labels", labels), ("annotations", annotations)):
            value = out.get(field)
            if isinstance(value, Mapping):
                out[field] = {rename(k): v for k, v in value.items()}
        finalizers = out.get("finalizers")
        if isinstance(finalizers, list):
            out["finalizers"] = [annotations(f) if isinstance(f, str) else f for f in finalizers]
        owners = out.get("ownerReferences")
        if isinstance(owners, list):
            out["ownerReferences"] = [self._object(o, outward=outward) for o in owners]
        return out

    def _operation(self, op: Any) -> Any:
        """A JSON patch operation: keys in its path and its value restored."""
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            return op
        out = dict(op)
        tokens = out["path"].split("/")
        for i, token in enumerate(tokens[:-1]):
            if token in ("labels", "annotations") and i >= 1 and tokens[i - 1] == "metadata":
                domains = _LABEL_DOMAINS if token == "labels" else _ANNOTATION_DOMAINS
                key = tokens[i + 1].replace("~1", "/").replace("~0", "~")
                key = _key_mapper(domains, outward=False)(key)
                tokens[i + 1] = key.replace("~", "~0").replace("/", "~1")
        out["path"] = "/".join(tokens)
        value = out.get("value")
        if isinstance(value, dict):
            if tokens[-1] in ("labels", "annotations") and tokens[-2:-1] == ["metadata"]:
                out["value"] = self._metadata({tokens[-1]: value}, outward=False)[tokens[-1]]
            elif tokens[-1] == "metadata":
                out["value"] = self._metadata(value, outward=False)
            else:
                out["value"] = self._object(value, outward=False)
        return out


def served_api(name: str, *, nads: bool = True) -> ServedApi:
    if name not in API_NAMES:
        raise ValueError(f"the KubeVirt API is upstream or deckhouse, not {name!r}")
    return ServedApi(name, nads=nads)

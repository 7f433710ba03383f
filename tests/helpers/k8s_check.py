"""Check YAML files against the Kubernetes API, with no cluster.

    k8s_check.py check FILE...   parse each file; validate every document
                                 (strict: unknown field names are errors)
    k8s_check.py dump FILE       print each document of FILE as one JSON line

Built-in kinds are validated by kubernetes-validate (the API's own OpenAPI
schemas, shipped in the PyPI package). A LeaderWorkerSet (a CRD, whose schema
is not shipped) is checked against the fields of the LeaderWorkerSet v1 API
as documented (leaderworkerset.x-k8s.io/v1, LeaderWorkerSetSpec), and its
leader and worker templates are validated as core v1 PodTemplateSpecs.

Prints one line per problem and exits 1 if there is any; exits 3 when the
validator is not installed (`pip install kubernetes-validate`).
"""

import json
import sys

try:
    import yaml
    import kubernetes_validate
except ImportError as e:  # pragma: no cover
    print(f"needs kubernetes-validate and PyYAML (pip install kubernetes-validate): {e}")
    sys.exit(3)

K8S_VERSION = "1.37.0"

# leaderworkerset.x-k8s.io/v1: the documented fields, field -> nested fields
# (None: a leaf or a type validated elsewhere).
LWS_SPEC = {
    "replicas": None,
    "leaderWorkerTemplate": {
        "leaderTemplate": "PodTemplateSpec",
        "workerTemplate": "PodTemplateSpec",
        "size": None,
        "restartPolicy": None,
        "subGroupPolicy": {"subGroupPolicyType": None, "subGroupSize": None},
        "volumeClaimTemplates": None,
        "persistentVolumeClaimRetentionPolicy": None,
    },
    "rolloutStrategy": {
        "type": None,
        "rollingUpdateConfiguration": {
            "partition": None,
            "maxUnavailable": None,
            "maxSurge": None,
        },
    },
    "startupPolicy": None,
    "networkConfig": {"subdomainPolicy": None},
}
LWS_ENUMS = {
    "spec.startupPolicy": {"LeaderCreated", "LeaderReady"},
    "spec.leaderWorkerTemplate.restartPolicy": {
        "Default",
        "RecreateGroupOnPodRestart",
        "RecreateGroupAfterStart",
        "None",
    },
    "spec.rolloutStrategy.type": {"RollingUpdate"},
    "spec.networkConfig.subdomainPolicy": {"Shared", "UniquePerReplica"},
}
LWS_TOP = {"apiVersion", "kind", "metadata", "spec", "status"}


def validate(doc, where):
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        return []
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        return [f"{where}: {path}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"{where}: no schema: {e}"]


def check_fields(value, allowed, path, where, templates):
    if not isinstance(value, dict):
        return [f"{where}: {path} is not an object"]
    out = []
    for key, sub in value.items():
        here = f"{path}.{key}"
        if key not in allowed:
            out.append(f"{where}: {here}: not a LeaderWorkerSet v1 field")
            continue
        shape = allowed[key]
        if shape == "PodTemplateSpec":
            templates.append((here, sub))
        elif isinstance(shape, dict):
            out += check_fields(sub, shape, here, where, templates)
        elif here in LWS_ENUMS and sub not in LWS_ENUMS[here]:
            out.append(f"{where}: {here}: {sub!r} is not one of {sorted(LWS_ENUMS[here])}")
    return out


def check_lws(doc, where):
    out = [f"{where}: {k}: not a LeaderWorkerSet field" for k in doc if k not in LWS_TOP]
    if doc.get("apiVersion") != "leaderworkerset.x-k8s.io/v1":
        out.append(f"{where}: apiVersion {doc.get('apiVersion')!r} is not leaderworkerset.x-k8s.io/v1")
    spec = doc.get("spec")
    lwt = spec.get("leaderWorkerTemplate") if isinstance(spec, dict) else None
    if not isinstance(lwt, dict) or "workerTemplate" not in lwt:
        out.append(f"{where}: spec.leaderWorkerTemplate.workerTemplate is required")
    templates = []
    out += check_fields(spec, LWS_SPEC, "spec", where, templates)
    name = doc.get("metadata", {}).get("name", "lws")
    for path, template in templates:
        wrapped = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": name},
            "template": template,
        }
        out += validate(wrapped, f"{where} {path} (as a PodTemplateSpec)")
    return out


def load(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def check(paths):
    problems = []
    for path in paths:
        try:
            docs = load(path)
        except yaml.YAMLError as e:
            problems.append(f"{path}: does not parse: {e}")
            continue
        for i, doc in enumerate(docs):
            if not isinstance(doc, dict) or "kind" not in doc:
                continue  # YAML that is not a Kubernetes object: parsing is the check
            where = f"{path} document {i} ({doc.get('kind')})"
            if doc["kind"] == "LeaderWorkerSet":
                problems += check_lws(doc, where)
            else:
                problems += validate(doc, where)
    for p in problems:
        print(p)
    return 1 if problems else 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2:]))
    if len(sys.argv) == 3 and sys.argv[1] == "dump":
        for doc in load(sys.argv[2]):
            print(json.dumps(doc))
        return
    print(__doc__)
    sys.exit(2)


if __name__ == "__main__":
    main()

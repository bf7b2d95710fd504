"""k8s-schema: deploy/k8s/** and the Knative ConfigMap against Kubernetes' own OpenAPI schemas, strictly
(unknown fields fail), for each version in KUBERNETES_VERSIONS."""

from __future__ import annotations

from . import common
from .common import Doc, Result, k8s_sets, kind_name, load_docs, rel

# The oldest Kubernetes the manifests support (preStop `sleep`, matchLabelKeys) and the newest that
# kubernetes-validate ships schemas for (its versions: kubernetes_validate.utils.all_versions()).
KUBERNETES_VERSIONS = ("1.30", "1.37")


def schema_errors(doc: Doc, source: str) -> list[str]:
    """kubernetes-validate, strict, for each supported version; a kind without schema is an error."""
    import kubernetes_validate.utils as kv

    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            errors.append(f"{source}: {kind_name(doc)} (Kubernetes {version}): {path}: {exc.message}")
        except kv.SchemaNotFoundError as exc:
            errors.append(f"{source}: {kind_name(doc)}: {exc.message}")
        except kv.VersionNotSupportedError:
            errors.append(f"kubernetes-validate has no schemas for Kubernetes {version}: upgrade it")
    return errors


def check_k8s_schema() -> Result:
    result = Result("k8s-schema")
    count = 0
    for docs in k8s_sets().values():
        for source, doc in docs:
            result.errors += schema_errors(doc, source)
            count += 1
    for source, doc in ((rel(p), d) for p in [common.DEPLOY / "knative" / "configmap.yaml"] for d in load_docs(p)):
        result.errors += schema_errors(doc, source)
        count += 1
    result.checked.append(f"{count} resources x Kubernetes {', '.join(KUBERNETES_VERSIONS)} (strict)")
    return result

"""yamllint: every YAML file under deploy/, with deploy/.yamllint."""

from __future__ import annotations

from . import common
from .common import Result, rel


def check_yamllint() -> Result:
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    result = Result("yamllint")
    conf = YamlLintConfig(file=str(common.DEPLOY / ".yamllint"))
    files = [p for p in sorted(common.DEPLOY.rglob("*")) if p.is_file() and conf.is_yaml_file(str(p))
             and not conf.is_file_ignored(str(p.relative_to(common.DEPLOY)))]
    for path in files:
        for problem in linter.run(path.read_text(), conf, str(path)):
            result.errors.append(f"{rel(path)}:{problem.line}:{problem.column}: {problem.desc} ({problem.rule})")
    result.checked.append(f"{len(files)} YAML files")
    return result

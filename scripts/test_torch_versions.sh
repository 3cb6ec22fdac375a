#!/usr/bin/env bash
# Run the plugin's Inductor-glue tests on each supported torch release, one venv per torch
# minor version at .venv-torch<major.minor>/ (created on first use, reused after).
#
#   scripts/test_torch_versions.sh                      # the default matrix (below), flydsl 0.5.0
#   scripts/test_torch_versions.sh 2.14.1 2.15.0        # just these
#   scripts/test_torch_versions.sh 2.15.0:flydsl0.3.4.1 # torch 2.15.0 with flydsl 0.3.4.1
#   scripts/test_torch_versions.sh default 2.15.0:flydsl0.3.4.1   # the defaults, then that
#
# A SPEC is TORCH[:flydslVERSION]. TORCH is a release (2.13.0) or a minor (2.12, meaning the
# newest 2.12.x). "default" stands for the default matrix. Specs with the same minor share a
# venv: flydsl is (re)installed to the requested version each time, so a venv holds whatever
# flydsl the last run of that minor asked for.
# Defaults: torch 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0 with flydsl $FLYDSL_VERSION (0.5.0).
#
# Per spec: torch alone is installed first; then the plugin with its test extra and the
# requested flydsl, WITH dependency resolution (pip install -e ".[test]", no --no-deps). pip
# must never touch torch there: the script compares torch's version before and after and marks
# the spec "TORCH CHANGED" (tests not run) if pip moved it -- that is what catches a torch cap
# in pyproject.toml that excludes a release we claim to support.
#
# pip constraints: a machine-wide pip constraint file that excludes the requested torch (this
# dev box caps torch<=2.14.1 in /etc/xdg/pip/constraints.txt) is lifted for THAT venv's pip
# commands only, by PIP_CONFIG_FILE=/dev/null. (An empty file is not enough: pip still reads the
# global config then; only os.devnull skips all config files.) Lifting also drops the configured
# local indexes, so everything for that venv comes from PyPI (torch 2.15 CUDA wheels: ~5 GB).
# Elsewhere (CI) nothing is lifted.
#
# Environment: PYTHON (interpreter for new venvs, default python3), FLYDSL_VERSION (default
# 0.5.0), LOG_DIR (pip logs, pytest output, junit xml; default a fresh /tmp dir), and pytest's
# own PYTEST_ADDOPTS (e.g. "-n 2 -x"). Exit status 0 only if every spec installed cleanly and
# passed. 2.13.0 is a local CPU wheel here; the other releases are CUDA builds from PyPI
# (several GB each), run on the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."

TESTS=(test/test_autoload.py test/test_coexistence.py test/test_ops.py test/test_eager.py test/inductor
       test/deploy/test_dispatch_table.py test/deploy/test_record.py test/deploy/test_no_compile_at_run_time.py test/deploy/test_winners.py
       test/integrations)
DEFAULT_SPECS=(2.11.0 2.12.1 2.13.0 2.14.1 2.15.0)
FLYDSL_VERSION=${FLYDSL_VERSION:-0.5.0}
PYTHON=${PYTHON:-python3}
LOG_DIR=${LOG_DIR:-$(mktemp -d /tmp/torch-versions.XXXXXX)}
mkdir -p "$LOG_DIR"

specs=()
for a in "${@:-default}"; do
  if [ "$a" = default ]; then specs+=("${DEFAULT_SPECS[@]}"); else specs+=("$a"); fi
done

# True if a pip constraint file from pip's configuration rejects torch==$1.
constraint_rejects_torch() {
  local files
  files=$("$PYTHON" -m pip config list 2>/dev/null | sed -n "s/^[^=]*constraint='\(.*\)'$/\1/p")
  [ -n "$files" ] || return 1
  # shellcheck disable=SC2086
  "$PYTHON" - "$1" $files <<'EOF'
import sys
from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
version, paths = sys.argv[1], sys.argv[2:]
for path in paths:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        line = line.split("#", 1)[0].strip()
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower() == "torch" and not req.specifier.contains(version, prereleases=True):
            sys.exit(0)
sys.exit(1)
EOF
}

# Installed distribution version, read from metadata (importing torch would run autoload).
dist_version() {
  "$1/bin/python" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: print('-')" "$2"
}

rows=()
failing=()
status=0
for spec in "${specs[@]}"; do
  tv=${spec%%:*}
  fly=$FLYDSL_VERSION
  if [ "$spec" != "$tv" ]; then
    fly=${spec#*:}
    fly=${fly#flydsl}
    fly=${fly#=}
  fi
  minor=$(cut -d. -f1,2 <<<"$tv")
  req="torch==$tv"
  [ "$tv" = "$minor" ] && req="torch==$tv.*"
  venv=".venv-torch$minor"
  tag="torch${tv}-flydsl${fly}"
  piplog="$LOG_DIR/$tag.pip.log"
  lift=()
  if constraint_rejects_torch "$tv"; then lift=(env PIP_CONFIG_FILE=/dev/null); fi
  pip=("${lift[@]}" "$venv/bin/python" -m pip)

  echo "=== $tag ($venv${lift:+, pip constraint lifted}) ==="
  t0=$SECONDS
  result="" torch_v="-" fly_v="-"
  counts=("-" "-" "-" "-")
  if [ ! -x "$venv/bin/python" ] && ! "$PYTHON" -m venv "$venv" >>"$piplog" 2>&1; then
    result="VENV FAILED"
  elif ! "${pip[@]}" install "$req" >>"$piplog" 2>&1; then
    result="TORCH INSTALL FAILED"
  else
    before=$(dist_version "$venv" torch)
    torch_v=$before
    if [[ "${before%%+*}" != "$tv" && "${before%%+*}" != "$tv".* ]]; then
      result="WRONG TORCH ($before)"
    elif ! "${pip[@]}" install -e ".[test]" "flydsl==$fly" >>"$piplog" 2>&1; then
      result="PLUGIN INSTALL FAILED"
    else
      torch_v=$(dist_version "$venv" torch)
      fly_v=$(dist_version "$venv" flydsl)
      if [ "$torch_v" != "$before" ]; then
        result="TORCH CHANGED ($before -> $torch_v)"
      elif [ "$fly_v" != "$fly" ]; then
        result="WRONG FLYDSL ($fly_v)"
      fi
    fi
  fi
  t_install=$((SECONDS - t0))
  if [ -n "$result" ]; then
    echo "$result; last pip output ($piplog):"
    tail -n 15 "$piplog"
  else
    xml="$LOG_DIR/$tag.xml"
    rm -f "$xml"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider --junitxml="$xml" "${TESTS[@]}" \
      2>&1 | tee "$LOG_DIR/$tag.pytest.log"
    rc=${PIPESTATUS[0]}
    if [ -f "$xml" ]; then
      # passed failed errors skipped, then one failing test id per line.
      mapfile -t parsed < <("$venv/bin/python" - "$xml" <<'EOF'
import os
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
tot = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
print(tot["tests"] - tot["failures"] - tot["errors"] - tot["skipped"], tot["failures"], tot["errors"], tot["skipped"])
for case in root.iter("testcase"):
    if case.find("failure") is not None or case.find("error") is not None:
        parts = case.get("classname", "").split(".")  # test.inductor.test_x[.TestClass]
        for i in range(len(parts), 0, -1):
            if os.path.exists("/".join(parts[:i]) + ".py"):
                parts = ["/".join(parts[:i]) + ".py"] + parts[i:]
                break
        print("::".join([p for p in parts if p] + [case.get("name")]))
EOF
      )
      read -r -a counts <<<"${parsed[0]}"
      for name in "${parsed[@]:1}"; do failing+=("$tag  $name"); done
    fi
    if [ "$rc" -eq 0 ]; then result="ok"; else result="FAILED (pytest rc=$rc)"; fi
  fi
  [ "$result" = ok ] || status=1
  rows+=("$(printf '%-30s %-14s %-8s %6s %6s %6s %7s %5ss %5ss  %s' "$spec" "$torch_v" "$fly_v" \
    "${counts[0]}" "${counts[1]}" "${counts[2]}" "${counts[3]}" "$t_install" "$((SECONDS - t0 - t_install))" "$result")")
done

echo
echo "=== summary (logs: $LOG_DIR) ==="
printf '%-30s %-14s %-8s %6s %6s %6s %7s %6s %6s  %s\n' spec torch flydsl passed failed errors skipped install tests result
for r in "${rows[@]}"; do echo "$r"; done
if [ ${#failing[@]} -gt 0 ]; then
  echo
  echo "failing tests:"
  printf '  %s\n' "${failing[@]}"
fi
exit $status

#!/usr/bin/env python3
"""Checks that every metric name in the alert rules and the Grafana dashboard is one the server exports.

    check_metrics.py METRICS_TEXT ALERTS_YML DASHBOARD_JSON [--dashboard-rules OUT]

METRICS_TEXT is a live server's GET /metrics. Names come from the `expr:` values of ALERTS_YML
(one line, or a `|`/`>` block) and the `expr` of every panel target and query variable of
DASHBOARD_JSON. A histogram `h` is exported as `h_bucket`, `h_sum` and `h_count` (not `h`); a
summary as `s`, `s_sum`, `s_count`. With --dashboard-rules, the dashboard's queries are also written
as a rules file (Grafana variables replaced) so that `promtool check rules` can parse them.
Exits 1 naming each unknown metric. Standard library only.
"""

import json
import re
import sys

# PromQL words that are not metric names when they stand before `{`, `[`, whitespace or `)`.
KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "atan2", "inf", "nan", "sum", "min", "max", "avg", "group", "stddev",
    "stdvar", "count", "count_values", "bottomk", "topk", "quantile",
}

GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
MATCHERS = re.compile(r"\{[^}]*\}")
VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+|\[\[\w+\]\]")
# An identifier not preceded by a name character or a digit (so `5m` is no name), then
# `{`, `[`, whitespace, `)`, `,` or the end; an identifier followed by `(` is a function.
NAME = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?=\s*(?:[{\[)\s,]|$))")


def metric_names(expr):
    """The metric names a PromQL expression reads."""
    expr = VARIABLE.sub("1m", expr)
    expr = STRING.sub('""', expr)
    expr = MATCHERS.sub("{}", expr)
    expr = GROUPING.sub(" ", expr)
    names = set()
    for m in NAME.finditer(expr):
        name = m.group(1)
        rest = expr[m.end():].lstrip()
        if rest.startswith("("):  # a function or an aggregation
            continue
        if name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names


def exported(metrics_text):
    """Series names a /metrics answer holds, and the histogram family names (for hints)."""
    names, histograms = set(), set()
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                family, kind = parts[2], parts[3]
                if kind == "histogram":
                    histograms.add(family)
                    names.update({family + "_bucket", family + "_sum", family + "_count"})
                elif kind == "summary":
                    names.update({family, family + "_sum", family + "_count"})
                else:
                    names.add(family)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names, histograms


def alert_exprs(path):
    """The `expr:` values of a rules file: `expr: X` on one line, or a `|`/`>` block under it."""
    exprs = []
    lines = open(path, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(?:-\s+)?expr:\s*(.*)$", lines[i])
        i += 1
        if not m:
            continue
        indent, value = len(m.group(1)), m.group(2).strip()
        if value[:1] in ("|", ">"):
            block = []
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                block.append(lines[i].strip())
                i += 1
            value = " ".join(block)
        elif value[:1] in ("'", '"'):
            value = value[1:-1]
        exprs.append(value)
    return exprs


def dashboard_exprs(path):
    """Every `expr` of the dashboard's panel targets (rows and nested panels too) and query variables."""
    dash = json.load(open(path, encoding="utf-8"))
    exprs = []

    def panels(items):
        for panel in items:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    exprs.append(("panel %r" % panel.get("title"), target["expr"]))
            panels(panel.get("panels", []))

    panels(dash.get("panels", []))
    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var.get("query")
            query = query.get("query", "") if isinstance(query, dict) else (query or "")
            m = re.match(r"^\s*label_values\(\s*(.*?)\s*,\s*\w+\s*\)\s*$", query)
            if m:
                exprs.append(("variable %r" % var.get("name"), m.group(1)))
    return exprs


def main(argv):
    args = argv[1:]
    rules_out = None
    if "--dashboard-rules" in args:
        at = args.index("--dashboard-rules")
        rules_out = args[at + 1]
        del args[at:at + 2]
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    metrics_path, alerts_path, dashboard_path = args
    known, histograms = exported(open(metrics_path, encoding="utf-8").read())
    if not known:
        print("check_metrics: %s holds no metrics" % metrics_path, file=sys.stderr)
        return 1

    uses = [("%s: alert expr" % alerts_path, e) for e in alert_exprs(alerts_path)]
    panel_exprs = dashboard_exprs(dashboard_path)
    uses += [("%s: %s" % (dashboard_path, where), e) for where, e in panel_exprs]
    if not any(w.startswith(alerts_path) for w, _ in uses):
        print("check_metrics: no expr found in %s" % alerts_path, file=sys.stderr)
        return 1
    if not panel_exprs:
        print("check_metrics: no panel expr found in %s" % dashboard_path, file=sys.stderr)
        return 1

    unknown, used = [], set()
    for where, expr in uses:
        names = metric_names(expr)
        if not names:
            unknown.append("%s reads no metric: %s" % (where, expr))
        for name in sorted(names):
            used.add(name)
            if name not in known:
                hint = " (a histogram: use %s_bucket, _sum or _count)" % name if name in histograms else ""
                unknown.append("%s uses unknown metric %s%s" % (where, name, hint))

    if rules_out:
        with open(rules_out, "w", encoding="utf-8") as out:
            out.write("groups:\n  - name: dashboard\n    rules:\n")
            for n, (_, expr) in enumerate(panel_exprs):
                expr = expr.replace("$__rate_interval", "5m").replace('"$instance"', '".*"')
                expr = VARIABLE.sub("5m", expr)
                out.write("      - record: dashboard:query_%d\n        expr: %s\n" % (n, json.dumps(expr)))

    if unknown:
        for line in unknown:
            print("check_metrics: " + line, file=sys.stderr)
        print("check_metrics: %d unknown metric use(s); the server exports: %s"
              % (len(unknown), ", ".join(sorted(known))), file=sys.stderr)
        return 1
    print("check_metrics: %d queries use %d metric names, all exported by the server"
          % (len(uses), len(used)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

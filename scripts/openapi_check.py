#!/usr/bin/env python3
"""Checks recorded GitHub API exchanges against GitHub's published OpenAPI
description (`@octokit/openapi`, `generated/api.github.com.json`).

The fake GitHub writes one JSON line per exchange when `FAKE_GITHUB_RECORD` names
a directory (see fake-github/src/record.rs). Both directions are checked:

- the request: a documented path and method, documented query parameters, and a
  body that validates against the operation's request schema;
- the response: a documented status, a body that validates against the schema
  for that status (required fields present, types right), and no field the
  schema does not name (the fake must not invent what GitHub does not send).

Usage: openapi_check.py DESCRIPTION.json RECORD_DIR
Exit status 1 when any exchange breaks the description.
"""

import collections
import glob
import json
import re
import sys
import urllib.parse

from openapi_schema_validator import OAS30Validator

# Path parameters whose values contain slashes.
SLASHED = {"path", "ref", "basehead"}
# GitHub answers a conditional GET (If-None-Match) with 304 on any endpoint,
# documented there or not.
CONDITIONAL = 304


def load(path):
    with open(path) as f:
        spec = json.load(f)
    allow_null_in_nullable_enums(spec)
    return spec


def allow_null_in_nullable_enums(node):
    """GitHub writes some nullable fields as an enum without null (a check
    run's `conclusion`): null is allowed there, as GitHub sends it."""
    if isinstance(node, dict):
        if node.get("nullable") and isinstance(node.get("enum"), list) and None not in node["enum"]:
            node["enum"] = node["enum"] + [None]
        for v in node.values():
            allow_null_in_nullable_enums(v)
    elif isinstance(node, list):
        for v in node:
            allow_null_in_nullable_enums(v)


def routes(spec):
    table = []
    for template, item in spec["paths"].items():
        pattern = "^"
        literal = 0
        for part in re.split(r"(\{[^}]+\})", template):
            if part.startswith("{"):
                name = part[1:-1]
                pattern += "(.+)" if name in SLASHED else "([^/]+)"
            else:
                pattern += re.escape(part)
                literal += len(part)
        table.append((literal, re.compile(pattern + "$"), template, item))
    # The most literal template first: `/pulls/{n}/merge` before `/pulls/{n}`.
    table.sort(key=lambda t: -t[0])
    return table


def find(table, method, path):
    for _, rx, template, item in table:
        if rx.match(path) and method.lower() in item:
            return template, item[method.lower()], item
    return None, None, None


class Checker:
    def __init__(self, spec):
        self.spec = spec
        self.table = routes(spec)
        self.violations = collections.OrderedDict()
        self.checked = 0

    def resolve(self, schema):
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 50:
            ref = schema["$ref"]
            node = self.spec
            for part in ref.lstrip("#/").split("/"):
                node = node[part]
            schema = node
            seen += 1
        return schema

    def note(self, key, example):
        entry = self.violations.setdefault(key, [0, example])
        entry[0] += 1

    def validate(self, where, schema, data):
        # `#/components/...` references resolve against the root: give the
        # schema the description's components.
        rooted = dict(schema)
        rooted["components"] = self.spec["components"]
        v = OAS30Validator(rooted)
        for e in v.iter_errors(data):
            # GitHub's description says `oneOf` where it means "one of these
            # shapes": a plain error body ({message, documentation_url}) is
            # valid under both `basic-error` and
            # `repository-rule-violation-error` (neither requires a field),
            # so GitHub's own 409s would fail a strict `oneOf`. Matching more
            # than one shape is matching.
            if e.validator == "oneOf" and "is valid under each of" in e.message:
                continue
            loc = "/".join(str(p) for p in e.absolute_path)
            self.note(f"{where}: {e.message[:160]} (at /{loc})", None)

    def extra_fields(self, where, schema, data, loc=""):
        """Fields in `data` that the schema does not name, recursively."""
        schema = self.resolve(schema)
        if not isinstance(schema, dict):
            return
        if isinstance(data, list):
            items = schema.get("items")
            if items is not None:
                for i, d in enumerate(data[:5]):
                    self.extra_fields(where, items, d, f"{loc}/{i}")
            return
        if not isinstance(data, dict):
            return
        props = {}
        open_ended = False
        stack = [schema]
        while stack:
            s = self.resolve(stack.pop())
            if not isinstance(s, dict):
                continue
            props.update(s.get("properties", {}))
            if s.get("additionalProperties") not in (None, False):
                open_ended = True
            for k in ("allOf", "anyOf", "oneOf"):
                stack.extend(s.get(k, []))
        if not props or open_ended:
            return
        for k, v in data.items():
            if k not in props:
                self.note(f"{where}: field `{loc}/{k}` is not in GitHub's schema", None)
            else:
                self.extra_fields(where, props[k], v, f"{loc}/{k}")

    def check(self, x):
        self.checked += 1
        method, path, status = x["method"], x["path"], x["status"]
        template, op, item = find(self.table, method, path)
        if op is None:
            self.note(f"{method} {path}: not a documented endpoint", None)
            return
        where = f"{method} {template}"
        # Request: query parameters and body.
        params = {p["name"]: p for p in self.parameters(op, item) if p.get("in") == "query"}
        for name, value in urllib.parse.parse_qsl(x.get("query") or "", keep_blank_values=True):
            p = params.get(name)
            if p is None:
                self.note(f"{where}: query parameter `{name}` is not documented", None)
                continue
            schema = self.resolve(p.get("schema", {}))
            if schema.get("type") == "integer" and not re.fullmatch(r"-?\d+", value):
                self.note(f"{where}: query parameter `{name}` is not an integer", value)
            if "enum" in schema and value not in schema["enum"]:
                self.note(f"{where}: query parameter `{name}`={value} is not one of {schema['enum']}", None)
        body = op.get("requestBody")
        if body is not None and x.get("request") is not None:
            content = self.resolve(body).get("content", {}).get("application/json")
            if content:
                self.validate(f"{where} request", content["schema"], x["request"])
        # Response: status and body.
        # Answers a test injected (faults, rate limits, hooks) are the test's.
        if x.get("injected") or (status == CONDITIONAL and method == "GET"):
            return
        resp = op["responses"].get(str(status)) or op["responses"].get("default")
        if resp is None:
            self.note(f"{where}: status {status} is not documented", None)
            return
        content = self.resolve(resp).get("content", {}).get("application/json")
        if content and "schema" in content and x.get("response") is not None:
            self.validate(f"{where} {status} response", content["schema"], x["response"])
            self.extra_fields(f"{where} {status} response", content["schema"], x["response"])

    def parameters(self, op, item):
        return [self.resolve(p) for p in item.get("parameters", []) + op.get("parameters", [])]


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    checker = Checker(load(sys.argv[1]))
    files = sorted(glob.glob(f"{sys.argv[2]}/*.jsonl"))
    for name in files:
        with open(name) as f:
            for line in f:
                checker.check(json.loads(line))
    print(f"OpenAPI check: {checker.checked} exchanges from {len(files)} fake GitHub(s)")
    if checker.checked == 0:
        # A check of nothing would pass: the recording was not made (the
        # variable that turns it on was lost, or the tests did not run).
        print("no exchange was recorded, so nothing was checked; failing")
        return 1
    if not checker.violations:
        print("0 violations")
        return 0
    total = sum(n for n, _ in checker.violations.values())
    print(f"{total} violations, {len(checker.violations)} distinct:")
    for key, (n, example) in checker.violations.items():
        print(f"  {n:5} × {key}" + (f" — e.g. {example!r}" if example else ""))
    return 1


if __name__ == "__main__":
    sys.exit(main())

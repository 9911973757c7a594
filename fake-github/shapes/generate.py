#!/usr/bin/env python3
"""Writes fake-github/src/github_shapes.json: for each endpoint the fake serves,
the least body GitHub's description requires of its success answer — every
required field, with a neutral value of its type (null where nullable, the
first value of an enum). The fake lays its own data over it (src/shapes.rs), so
its answers carry every field GitHub always sends.

Usage: generate.py DESCRIPTION.json > fake-github/src/github_shapes.json
Re-run it when the fake serves a new endpoint (add the endpoint below).
"""

import json
import sys

# (method, template) of every endpoint the fake answers with a body.
ENDPOINTS = [
    ("get", "/repos/{owner}/{repo}"),
    ("post", "/app/installations/{installation_id}/access_tokens"),
    ("get", "/repos/{owner}/{repo}/collaborators/{username}/permission"),
    ("post", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("patch", "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
    ("get", "/repos/{owner}/{repo}/git/ref/{ref}"),
    ("post", "/repos/{owner}/{repo}/git/refs"),
    ("get", "/repos/{owner}/{repo}/contents/{path}"),
    ("put", "/repos/{owner}/{repo}/contents/{path}"),
    ("get", "/repos/{owner}/{repo}/compare/{basehead}"),
    ("get", "/repos/{owner}/{repo}/pulls"),
    ("post", "/repos/{owner}/{repo}/pulls"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("put", "/repos/{owner}/{repo}/pulls/{pull_number}/merge"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/files"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments"),
    ("post", "/repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers"),
    ("get", "/repos/{owner}/{repo}/commits/{ref}/check-runs"),
    ("get", "/repos/{owner}/{repo}/commits/{ref}"),
    ("post", "/repos/{owner}/{repo}/check-runs"),
    ("get", "/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations"),
    ("get", "/repos/{owner}/{repo}/issues"),
    ("post", "/repos/{owner}/{repo}/issues"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}"),
    ("delete", "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}"),
    ("patch", "/repos/{owner}/{repo}/issues/{issue_number}"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/labels"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/sub_issues"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/sub_issues"),
    ("post", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches"),
    ("get", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs"),
    ("get", "/repos/{owner}/{repo}/actions/runs/{run_id}"),
    ("get", "/user"),
    ("get", "/app"),
    ("get", "/repos/{owner}/{repo}/installation"),
    ("get", "/app/hook/deliveries"),
    ("get", "/repos/{owner}/{repo}/actions/secrets"),
    ("post", "/app-manifests/{code}/conversions"),
]


def main():
    spec = json.load(open(sys.argv[1]))

    def resolve(s):
        while isinstance(s, dict) and "$ref" in s:
            node = spec
            for part in s["$ref"].lstrip("#/").split("/"):
                node = node[part]
            s = node
        return s

    def least(schema, depth=0):
        s = resolve(schema)
        if depth > 12 or not isinstance(s, dict):
            return None
        if "allOf" in s:
            out = {}
            for part in s["allOf"]:
                v = least(part, depth + 1)
                if isinstance(v, dict):
                    out.update(v)
            return out
        for key in ("oneOf", "anyOf"):
            if key in s:
                # The fake picks the option that fits its answer (src/shapes.rs).
                return {"$oneOf": [least(o, depth + 1) for o in s[key]]}
        is_object = s.get("type") == "object" or "properties" in s
        if s.get("nullable") and not is_object:
            return None
        if "enum" in s:
            return next((e for e in s["enum"] if e is not None), None)
        t = s.get("type")
        if t == "object" or "properties" in s:
            props = s.get("properties", {})
            return {k: least(props[k], depth + 1) for k in s.get("required", []) if k in props}
        if t == "array":
            # One element: the shape every item of the list gets.
            return [least(s.get("items", {}), depth + 1)]
        if t == "integer" or t == "number":
            return 0
        if t == "boolean":
            return False
        if t == "string":
            fmt = s.get("format")
            if fmt == "date-time":
                return "2026-01-01T00:00:00Z"
            if fmt == "uri":
                return "https://api.github.com/"
            return ""
        return None

    shapes = {}
    for method, template in ENDPOINTS:
        op = spec["paths"][template][method]
        for status, resp in op["responses"].items():
            if not status.startswith("2"):
                continue
            content = resolve(resp).get("content", {}).get("application/json")
            if content and "schema" in content:
                shapes[f"{method.upper()} {template}"] = least(content["schema"])
                break
    json.dump(shapes, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()

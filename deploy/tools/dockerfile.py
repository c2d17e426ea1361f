#!/usr/bin/env python3
"""Reads the project's Dockerfile and .dockerignore for deploy/check-image and deploy/validate.

Only the Dockerfile subset the project uses is understood (FROM, ARG, ENV, WORKDIR, COPY, RUN,
LABEL, USER, EXPOSE, STOPSIGNAL, ENTRYPOINT, CMD; backslash continuations; comment lines inside
continuations). Anything else is an error, so the emulation never silently skips a step.

  dockerfile.py steps DOCKERFILE STAGE     bash calls (df_arg, df_env, df_workdir, df_copy,
                                           df_run, df_user, df_entrypoint, df_cmd) for one stage
  dockerfile.py stages DOCKERFILE          "NAME IMAGE" per stage
  dockerfile.py apt-packages DOCKERFILE STAGE
                                           the packages of the stage's `apt-get install` lines
  dockerfile.py shell-array FILE NAME      the words of a bash array `NAME=( ... )` in FILE
  dockerfile.py context ROOT               NUL-separated paths of the build context under ROOT,
                                           after .dockerignore
"""

import json
import os
import re
import shlex
import sys

SUPPORTED = {"FROM", "ARG", "ENV", "WORKDIR", "COPY", "RUN", "LABEL", "USER", "EXPOSE",
             "STOPSIGNAL", "ENTRYPOINT", "CMD"}


class DockerfileError(Exception):
    pass


def instructions(path):
    """Yields (line_number, KEYWORD, rest) with continuations joined."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        start = i + 1
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = []
        while True:
            stripped = line.rstrip()
            if stripped.endswith("\\"):
                parts.append(stripped[:-1])
                # Comment and empty lines inside a continuation are dropped, as Docker does.
                while i < len(lines) and (lines[i].lstrip().startswith("#") or not lines[i].strip()):
                    i += 1
                if i >= len(lines):
                    raise DockerfileError("%s:%d: continuation at end of file" % (path, start))
                line = lines[i]
                i += 1
                continue
            parts.append(stripped)
            break
        text = " ".join(p.strip() for p in parts)
        keyword, _, rest = text.partition(" ")
        keyword = keyword.upper()
        if keyword not in SUPPORTED:
            raise DockerfileError("%s:%d: %s is not understood by deploy/check-image" % (path, start, keyword))
        yield start, keyword, rest.strip()


def stages(path):
    """[(name, image, [(line, keyword, rest), ...]), ...]"""
    result = []
    for line, keyword, rest in instructions(path):
        if keyword == "FROM":
            words = rest.split()
            if len(words) == 3 and words[1].upper() == "AS":
                result.append((words[2], words[0], []))
            elif len(words) == 1:
                result.append((str(len(result)), words[0], []))
            else:
                raise DockerfileError("%s:%d: FROM must be 'IMAGE [AS NAME]'" % (path, line))
            continue
        if not result:
            raise DockerfileError("%s:%d: %s before the first FROM" % (path, line, keyword))
        result[-1][2].append((line, keyword, rest))
    return result


def find_stage(path, name):
    for stage in stages(path):
        if stage[0] == name:
            return stage
    raise DockerfileError("%s: no stage named %s" % (path, name))


def key_values(rest):
    """ENV/ARG/LABEL arguments as [(key, value or None)]."""
    words = shlex.split(rest)
    if len(words) >= 2 and "=" not in words[0]:  # legacy `ENV KEY value`
        return [(words[0], " ".join(words[1:]))]
    pairs = []
    for word in words:
        key, eq, value = word.partition("=")
        pairs.append((key, value if eq else None))
    return pairs


def exec_form(path, line, rest):
    try:
        argv = json.loads(rest)
    except ValueError:
        raise DockerfileError("%s:%d: use the exec (JSON) form" % (path, line))
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise DockerfileError("%s:%d: exec form must be a list of strings" % (path, line))
    return argv


def emit_steps(path, name):
    _, image, body = find_stage(path, name)
    q = shlex.quote
    out = ["df_from %s" % q(image)]
    for line, keyword, rest in body:
        where = "%s:%d" % (os.path.basename(path), line)
        if keyword == "ARG":
            for key, value in key_values(rest):
                out.append("df_arg %s %s %s" % (q(where), q(key), q(value if value is not None else "")))
        elif keyword == "ENV":
            for key, value in key_values(rest):
                out.append("df_env %s %s %s" % (q(where), q(key), q(value or "")))
        elif keyword == "WORKDIR":
            out.append("df_workdir %s %s" % (q(where), q(rest)))
        elif keyword == "COPY":
            words = shlex.split(rest)
            source_stage = ""
            while words and words[0].startswith("--"):
                flag = words.pop(0)
                if flag.startswith("--from="):
                    source_stage = flag[len("--from="):]
                else:
                    raise DockerfileError("%s: COPY %s is not emulated" % (where, flag))
            if len(words) < 2:
                raise DockerfileError("%s: COPY needs a source and a destination" % where)
            out.append("df_copy %s %s %s" % (q(where), q(source_stage), " ".join(q(w) for w in words)))
        elif keyword == "RUN":
            if rest.startswith("["):
                raise DockerfileError("%s: RUN in exec form is not emulated" % where)
            out.append("df_run %s %s" % (q(where), q(rest)))
        elif keyword == "USER":
            out.append("df_user %s %s" % (q(where), q(rest)))
        elif keyword == "ENTRYPOINT":
            out.append("df_entrypoint %s %s" % (q(where), " ".join(q(a) for a in exec_form(path, line, rest))))
        elif keyword == "CMD":
            out.append("df_cmd %s %s" % (q(where), " ".join(q(a) for a in exec_form(path, line, rest))))
        # LABEL, EXPOSE, STOPSIGNAL: metadata only; nothing to run.
    print("\n".join(out))


def apt_packages(path, name):
    _, _, body = find_stage(path, name)
    packages = []
    for _, keyword, rest in body:
        if keyword != "RUN":
            continue
        for command in re.split(r"&&|;|\|\|", rest):
            words = shlex.split(command)
            if len(words) >= 2 and words[0] in ("apt-get", "apt") and "install" in words:
                after = words[words.index("install") + 1:]
                packages += [w for w in after if not w.startswith("-")]
    return packages


def shell_array(path, name):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    match = re.search(r"^\s*%s=\((.*?)\)" % re.escape(name), text, re.S | re.M)
    if not match:
        raise DockerfileError("%s: no array %s=( ... )" % (path, name))
    body = "\n".join(l.split("#", 1)[0] for l in match.group(1).split("\n"))
    return body.split()


def ignore_patterns(root):
    """.dockerignore as [(exclude?, regex)], Docker's rules: relative to the root, `*` and `?`
    stay within one path element, `**` spans any number, `!` re-includes, the last match wins,
    and a pattern that matches a directory excludes everything under it."""
    path = os.path.join(root, ".dockerignore")
    patterns = []
    if not os.path.exists(path):
        return patterns
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            exclude = not line.startswith("!")
            line = line.lstrip("!").strip()
            line = os.path.normpath(line).lstrip("/")
            regex, i = "", 0
            while i < len(line):
                if line.startswith("**/", i):
                    regex += "(?:.*/)?"
                    i += 3
                elif line.startswith("**", i):
                    regex += ".*"
                    i += 2
                elif line[i] == "*":
                    regex += "[^/]*"
                    i += 1
                elif line[i] == "?":
                    regex += "[^/]"
                    i += 1
                else:
                    regex += re.escape(line[i])
                    i += 1
            patterns.append((exclude, re.compile(regex + r"\Z")))
    return patterns


def excluded(relpath, patterns):
    result = False
    parts = relpath.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    for exclude, regex in patterns:
        if any(regex.match(p) for p in prefixes):
            result = exclude
    return result


def context_files(root):
    patterns = ignore_patterns(root)
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        # Descend into an excluded directory only if a later `!` pattern could re-include.
        has_negation = any(not ex for ex, _ in patterns)
        kept = []
        for d in sorted(dirnames):
            if has_negation or not excluded(rel_dir + d, patterns):
                kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            rel = rel_dir + name
            if not excluded(rel, patterns):
                files.append(rel)
    return files


def main(argv):
    try:
        if len(argv) == 3 and argv[0] == "steps":
            emit_steps(argv[1], argv[2])
        elif len(argv) == 2 and argv[0] == "stages":
            for name, image, _ in stages(argv[1]):
                print(name, image)
        elif len(argv) == 3 and argv[0] == "apt-packages":
            print(" ".join(apt_packages(argv[1], argv[2])))
        elif len(argv) == 3 and argv[0] == "shell-array":
            print(" ".join(shell_array(argv[1], argv[2])))
        elif len(argv) == 2 and argv[0] == "context":
            sys.stdout.write("".join(f + "\0" for f in context_files(argv[1])))
        else:
            sys.stderr.write(__doc__)
            return 2
    except (DockerfileError, OSError) as e:
        sys.stderr.write("dockerfile.py: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

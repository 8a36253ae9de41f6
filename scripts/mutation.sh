#!/usr/bin/env bash
# Mutation testing of ctoken's security code with gremlins (pinned below).
#
#   scripts/mutation.sh [options] [FILE.go ...]
#
# Runs gremlins once per file (the other files of the package excluded), with
# gremlins' default mutators plus invert-logical and invert-loopctrl, prints
# a per-file table (killed, lived, documented equivalents, not covered,
# timed out, not viable, efficacy, adjusted efficacy), lists every survivor
# with its source line, and exits non-zero when the adjusted efficacy of the
# files run is below --threshold. Survivors documented as equivalent in
# docs/contributing/mutation-survivors.md do not count against the adjusted
# efficacy.
#
# Files are paths relative to the repository root, in the root module or in
# a nested module (a store: `scripts/mutation.sh sqlitestore/lease.go`). With
# none, the default list is the security code: every non-test file but
# doc.go of the root package (tokens, keys, one-time, state, fingerprint)
# and of webhook/, replay/, internal/{b64,mac,reason,cursorwire,jcs} where
# they exist.
#
# Options:
#   --threshold PCT      minimum adjusted efficacy (default 95)
#   --workers N          gremlins workers (default 1)
#   --timeout-coefficient N
#                        per-mutant timeout: N times the coverage run
#                        (default 5; gremlins' own 3 times out under load)
#   --changed BASE       only the files (of the list) that differ from git BASE
#   --diff BASE          only the mutants on lines that differ from git BASE
#                        (the working tree against the merge base of BASE
#                        and HEAD), through gremlins --diff BASE with git's
#                        diff.context set to 0: gremlins takes each hunk as
#                        its LinesAdded lines after the leading context,
#                        which skips changed lines and takes unchanged ones
#                        when a hunk has context lines inside. The files run
#                        are still those listed; add --changed BASE to skip
#                        the unchanged ones. (gremlins names a file from the
#                        directory it mutates, git from the repository's
#                        top: a git wrapper passes --relative, without which
#                        a file outside the root package had every mutant
#                        skipped.)
#   --budget SECONDS     start no file once SECONDS have passed; a file
#                        already started always runs to the end (gremlins'
#                        own per-mutant timeouts, a multiple of the file's
#                        coverage run, bound it), so the first file always
#                        completes and slowness alone never fails the step.
#                        Files left unstarted are listed, not failed. Files
#                        named on the command line run in the order given
#                        (put the one that matters most first); the default
#                        list runs smallest file first. The table covers the
#                        files that ran.
#   --out DIR            keep each file's gremlins JSON and log in DIR
#                        (default: a temporary directory, removed at exit)
#   --list               print the files that would run, and exit
#   --tests DIR          the package whose tests judge the mutants, a
#                        directory relative to the repository root (default:
#                        the mutated file's own package). It may be in
#                        another module of go.work: sqlitestore's suite runs
#                        in sqlitestore/drivertest. Tests that need a server
#                        find it as they always do (run the script under
#                        .ci/redis.sh; pgstore's TestMain starts its own).
#   --run REGEX          only the tests matching REGEX (go test -run), to
#                        see which mutants one set of tests kills
#   --tags TAGS          build tags for the tests (-tags ncruces)
#   --lines A-B[,C-D...] only the mutants on those lines of the one file
#                        named: a test's reach, at a fraction of the file's
#                        cost (gremlins --diff, fed a diff that adds them)
#
# A file in a nested module, --tests, --run or --tags put a wrapper for go
# before gremlins on PATH: gremlins copies the file's module (not go.work,
# which the nested modules need) and runs the mutated package's tests. The
# wrapper runs --tests' package instead, under a go.work that uses gremlins'
# copy for the mutated module and its nested modules and the repository for
# every other module; the coverage run goes through it too (-coverpkg the
# mutated package), so "not covered" means not covered by those tests.
#
# Exit status: 0 when the threshold holds (or no listed file changed under
# --changed), 1 when it does not or gremlins fails, 2 on a usage error.
set -euo pipefail

GREMLINS_VERSION=v0.6.0
cd "$(dirname "$0")/.."
root=$(pwd)

threshold=95
workers=1
coefficient=5
changed=""
diffbase=""
budget=0
list_only=0
keep=""
testdir=""
runre=""
tags=""
lines=""
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threshold) threshold=${2:?--threshold needs a value}; shift 2 ;;
    --workers) workers=${2:?--workers needs a value}; shift 2 ;;
    --timeout-coefficient) coefficient=${2:?--timeout-coefficient needs a value}; shift 2 ;;
    --changed) changed=${2:?--changed needs a git revision}; shift 2 ;;
    --diff) diffbase=${2:?--diff needs a git revision}; shift 2 ;;
    --budget) budget=${2:?--budget needs seconds}; shift 2 ;;
    --out) keep=${2:?--out needs a directory}; shift 2 ;;
    --list) list_only=1; shift ;;
    --tests) testdir=${2:?--tests needs a directory}; shift 2 ;;
    --run) runre=${2:?--run needs a regular expression}; shift 2 ;;
    --tags) tags=${2:?--tags needs build tags}; shift 2 ;;
    --lines) lines=${2:?--lines needs line ranges}; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    --*) echo "mutation.sh: unknown option $1" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
if ! [[ "$threshold" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "mutation.sh: --threshold $threshold is not a percentage" >&2
  exit 2
fi
for n in "$workers" "$coefficient" "$budget"; do
  if ! [[ "$n" =~ ^[0-9]+$ ]]; then
    echo "mutation.sh: $n is not a whole number" >&2
    exit 2
  fi
done
if [ "$workers" = 0 ] || [ "$coefficient" = 0 ]; then
  echo "mutation.sh: --workers and --timeout-coefficient must be at least 1" >&2
  exit 2
fi

default_list=0
if [ ${#files[@]} -eq 0 ]; then
  default_list=1
  # The root package (cursors, request state, one-time tokens, keys and
  # whatever the webhook and replay code left behind) and the packages the
  # split moved security code to, and the idempotency middleware; doc.go
  # files hold no code.
  for d in . webhook replay idempotency internal/b64 internal/mac internal/reason internal/cursorwire internal/jcs; do
    [ -d "$d" ] || continue
    for f in "$d"/*.go; do
      case "$f" in *_test.go|*/doc.go) continue ;; esac
      files+=("${f#./}")
    done
  done
fi
for f in "${files[@]}"; do
  case "$f" in
    *_test.go|/*|*..*) echo "mutation.sh: $f: want a non-test .go file relative to the repository root" >&2; exit 2 ;;
  esac
  if [ ! -f "$f" ] || [[ "$f" != *.go ]]; then
    echo "mutation.sh: $f: no such .go file" >&2
    exit 2
  fi
done

if [ -n "$lines" ]; then
  if ! [[ "$lines" =~ ^[0-9]+-[0-9]+(,[0-9]+-[0-9]+)*$ ]]; then
    echo "mutation.sh: --lines $lines: want A-B[,C-D...]" >&2
    exit 2
  fi
  if [ ${#files[@]} -ne 1 ] || [ -n "$diffbase$changed" ]; then
    echo "mutation.sh: --lines takes one file, and no --diff or --changed" >&2
    exit 2
  fi
fi
testdir=${testdir%/}
if [ -n "$testdir" ]; then
  case "$testdir" in
    /*|*..*) echo "mutation.sh: --tests $testdir: want a directory relative to the repository root" >&2; exit 2 ;;
  esac
  if ! compgen -G "$testdir/*_test.go" >/dev/null; then
    echo "mutation.sh: --tests $testdir: no tests there" >&2
    exit 2
  fi
fi

# modof prints the directory (relative to the repository root, "." for the
# root module) of the module holding directory $1.
modof() {
  local d=$1
  while [ "$d" != . ] && [ ! -f "$d/go.mod" ]; do d=$(dirname "$d"); done
  echo "$d"
}

if [ -n "$diffbase" ] && ! git rev-parse --verify --quiet "$diffbase^{commit}" >/dev/null; then
  # gremlins would fail later, per file, with a less helpful message.
  echo "mutation.sh: --diff $diffbase is not a git revision" >&2
  exit 2
fi
if [ -n "$changed" ]; then
  # Not a process substitution: an unknown BASE must fail, not look like
  # "nothing changed".
  if ! diff=$(git diff --name-only "$changed" -- "${files[@]}"); then
    echo "mutation.sh: git diff against $changed failed" >&2
    exit 2
  fi
  files=()
  [ -z "$diff" ] || mapfile -t files <<<"$diff"
  if [ ${#files[@]} -eq 0 ]; then
    echo "mutation.sh: no security file differs from $changed; nothing to mutate"
    exit 0
  fi
fi
if [ "$budget" != 0 ] && [ "$default_list" = 1 ]; then
  # Smallest first: roughly the cheapest files to mutate.
  mapfile -t files < <(for f in "${files[@]}"; do printf '%s\t%s\n' "$(wc -c <"$f")" "$f"; done | sort -n | cut -f2)
fi
if [ "$list_only" = 1 ]; then
  printf '%s\n' "${files[@]}"
  exit 0
fi

# The pinned binary, at the path go install writes it (not whatever gremlins
# comes first on PATH). gremlins --version says "dev" for a go-installed
# binary, so the module version it was built from is read instead.
bin=$(go env GOBIN)
[ -n "$bin" ] || bin="$(go env GOPATH)/bin"
gremlins="$bin/gremlins"
if ! { [ -x "$gremlins" ] &&
       go version -m "$gremlins" | grep -Eq "^[[:space:]]+mod[[:space:]]+github.com/go-gremlins/gremlins[[:space:]]+$GREMLINS_VERSION([[:space:]]|\$)"; }; then
  echo "--- installing gremlins $GREMLINS_VERSION"
  go install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION"
fi

# gremlins' work directories go in scratch, removed at exit even when the
# budget cuts a run short before gremlins cleans up after itself.
scratch=$(mktemp -d)
# Traversable by others: pgstore's tests, under root, run PostgreSQL as
# the postgres user in a directory below TMPDIR, which is scratch.
chmod 711 "$scratch"
if [ -n "$keep" ]; then
  mkdir -p "$keep"
  out=$(cd "$keep" && pwd)
  trap 'rm -rf "$scratch"' EXIT
else
  out=$(mktemp -d)
  trap 'rm -rf "$scratch" "$out"' EXIT
fi
# The go wrapper (see the header): written once, used for a file in a
# nested module or when --tests, --run or --tags is given.
realgo=$(command -v go)
wrapdir="$scratch/bin"
mkdir -p "$wrapdir"
cat >"$wrapdir/go" <<'WRAP'
#!/usr/bin/env bash
# go, as gremlins calls it, for scripts/mutation.sh. MUT_* come from there.
set -euo pipefail
case "${1:-} ${2:-}" in
  "mod download") exit 0 ;; # in workspace mode it rewrites go.work.sum; the tests fetch what they lack
  test\ *) shift ;;
  *) exec "$MUT_GO" "$@" ;;
esac
cover="" timeout=""
while [ $# -gt 0 ]; do
  case "$1" in
    -coverprofile) cover=$2; shift 2 ;;
    -timeout) timeout=$2; shift 2 ;;
    -tags|-coverpkg) shift 2 ;;
    *) shift ;;
  esac
done
args=(test -count=1)
[ -z "$MUT_TAGS" ] || args+=(-tags "$MUT_TAGS")
[ -z "$MUT_RUN" ] || args+=(-run "$MUT_RUN")
if [ -n "$cover" ]; then
  # The coverage run, in the repository (gremlins runs it from the module).
  cd "$MUT_REPO/$MUT_TESTS"
  exec "$MUT_GO" "${args[@]}" -coverpkg "$MUT_PKG" -coverprofile "$cover" .
fi
# A mutant: the working directory is the mutated package in gremlins' copy
# of module $MUT_MOD.
copy=$PWD
[ "$MUT_CALLDIR" = . ] || copy=${copy%/"$MUT_CALLDIR"}
# where D (relative to the repository root) is in this run: in the copy
# when it is in the mutated module, else in the repository.
where() {
  if [ "$MUT_MOD" = . ]; then echo "$copy/$1"
  elif [ "$1" = "$MUT_MOD" ]; then echo "$copy"
  elif [ "${1#"$MUT_MOD"/}" != "$1" ]; then echo "$copy/${1#"$MUT_MOD"/}"
  else echo "$MUT_REPO/$1"; fi
}
work=$(mktemp -d "$copy/.mutwork-XXXXXX")
trap 'rm -rf "$work"' EXIT
while IFS= read -r line; do
  if [[ "$line" =~ ^([[:space:]]*(use[[:space:]]+)?)\.(/([^[:space:]]*))?[[:space:]]*$ ]]; then
    d=${BASH_REMATCH[4]}; printf '%s%s\n' "${BASH_REMATCH[1]}" "$(where "${d:-.}")"
  elif [[ "$line" =~ ^(replace[[:space:]].*=\>[[:space:]]*)\.(/([^[:space:]]*))?[[:space:]]*$ ]]; then
    d=${BASH_REMATCH[3]}; printf '%s%s\n' "${BASH_REMATCH[1]}" "$(where "${d:-.}")"
  else
    printf '%s\n' "$line"
  fi
done <"$MUT_REPO/go.work" >"$work/go.work"
[ ! -f "$MUT_REPO/go.work.sum" ] || cp "$MUT_REPO/go.work.sum" "$work/go.work.sum"
cd "$(where "$MUT_TESTS")"
GOWORK="$work/go.work" "$MUT_GO" "${args[@]}" ${timeout:+-timeout "$timeout"} -failfast .
WRAP
chmod +x "$wrapdir/go"
# go for every run: gremlins' "go mod download" (which, in workspace mode,
# rewrites go.work.sum) does nothing; the tests fetch what they lack.
shimdir="$scratch/shim"
mkdir -p "$shimdir"
cat >"$shimdir/go" <<'WRAP'
#!/usr/bin/env bash
if [ "${1:-} ${2:-}" = "mod download" ]; then exit 0; fi
exec "$MUT_GO" "$@"
WRAP
chmod +x "$shimdir/go"
# git, for --lines and --diff: gremlins reads "git diff --merge-base REF"
# and names a file relative to the directory it mutates, where git names
# it from the repository's top (so, without this, --diff on a file outside
# the root package skipped every mutant). With MUT_LINES it answers with a
# diff that adds those lines to MUT_FILE; else it runs git diff
# --relative=MUT_RELATIVE.
realgit=$(command -v git)
gitdir="$scratch/gitbin"
mkdir -p "$gitdir"
cat >"$gitdir/git" <<'WRAP'
#!/usr/bin/env bash
set -euo pipefail
if [ "${1:-}" != diff ]; then exec "$MUT_GIT" "$@"; fi
if [ -z "${MUT_LINES:-}" ]; then shift; exec "$MUT_GIT" diff --relative="$MUT_RELATIVE" "$@"; fi
printf 'diff --git a/%s b/%s\n--- a/%s\n+++ b/%s\n' "$MUT_FILE" "$MUT_FILE" "$MUT_FILE" "$MUT_FILE"
IFS=, read -ra ranges <<<"$MUT_LINES"
for r in "${ranges[@]}"; do
  a=${r%-*} b=${r#*-}
  printf '@@ -%d,0 +%d,%d @@\n' $((a - 1)) "$a" $((b - a + 1))
  for ((i = a; i <= b; i++)); do echo +; done
done
WRAP
chmod +x "$gitdir/git"

start=$SECONDS
reports=()
skipped=()
for f in "${files[@]}"; do
  dir=$(dirname "$f")
  base=$(basename "$f")
  # GOFLAGS=-count=1: with a warm test cache gremlins' coverage run takes
  # well under a second, its per-mutant timeout (a multiple of that) comes
  # out near 2 s, and nearly every mutant is reported as timed out.
  # Exclude every other file gremlins would walk from dir (it matches these
  # against paths relative to dir, though it must run from the module root):
  # subdirectories (nested packages and modules) and the package's other
  # non-test files.
  excludes=(-E '/')
  for g in "$dir"/*.go; do
    g=$(basename "$g")
    case "$g" in *_test.go|"$base") continue ;; esac
    excludes+=(-E "^${g//./\\.}\$")
  done
  onlydiff=()
  gitenv=()
  if [ -n "$diffbase" ]; then
    onlydiff=(--diff "$diffbase")
    n=${GIT_CONFIG_COUNT:-0}
    gitenv=("GIT_CONFIG_COUNT=$((n + 1))" "GIT_CONFIG_KEY_$n=diff.context" "GIT_CONFIG_VALUE_$n=0")
  fi
  # The budget decides only whether a file starts: cutting a file short
  # would throw its work away and turn machine speed into a failure.
  if [ "$budget" != 0 ] && [ $((SECONDS - start)) -ge "$budget" ]; then
    skipped+=("$f")
    continue
  fi
  wrapenv=()
  mod=$(modof "$dir")
  calldir=.
  [ "$mod" = . ] || [ "$dir" = "$mod" ] || calldir=${dir#"$mod"/}
  [ "$mod" = . ] && calldir=$dir
  path="$shimdir:$PATH"
  if [ -n "$lines" ]; then
    onlydiff=(--diff HEAD)
    wrapenv+=("MUT_GIT=$realgit" "MUT_LINES=$lines" "MUT_FILE=$base")
    path="$gitdir:$path"
  elif [ -n "$diffbase" ] && [ "$dir" != . ]; then
    wrapenv+=("MUT_GIT=$realgit" "MUT_RELATIVE=$dir")
    path="$gitdir:$path"
  fi
  if [ "$mod" != . ] || [ -n "$testdir$runre$tags$lines" ]; then
    pkg=$(cd "$dir" && "$realgo" list -f '{{.ImportPath}}' .)
    path="$wrapdir:$path"
    wrapenv+=("MUT_REPO=$root" "MUT_MOD=$mod" "MUT_CALLDIR=$calldir"
      "MUT_TESTS=${testdir:-$dir}" "MUT_PKG=$pkg" "MUT_RUN=$runre" "MUT_TAGS=$tags")
  fi
  wrapenv+=("PATH=$path" "MUT_GO=$realgo")
  json="$out/$(echo "$f" | tr / _).json"
  echo "--- gremlins $f${testdir:+ (tests of $testdir)}${runre:+ (-run $runre)}${tags:+ (-tags $tags)}"
  rc=0
  (cd "$root/$mod" && TMPDIR="$scratch" GOFLAGS="${GOFLAGS:+$GOFLAGS }-count=1" env "${gitenv[@]}" "${wrapenv[@]}" "$gremlins" unleash "./$calldir" --workers "$workers" \
      --timeout-coefficient "$coefficient" --invert-logical --invert-loopctrl \
      "${excludes[@]}" "${onlydiff[@]}" -o "$json" >"$json.log" 2>&1) || rc=$?
  if [ "$rc" -eq 0 ] && [ ! -s "$json" ] && grep -q '^No results to report' "$json.log"; then
    # A file with no mutable expression (a var or type declaration only).
    echo "    no mutants in $f"
    continue
  fi
  if [ "$rc" -ne 0 ] || [ ! -s "$json" ]; then
    echo "mutation.sh: gremlins failed on $f (exit $rc):" >&2
    tail -n 30 "$json.log" >&2
    exit 1
  fi
  reports+=("$dir=$json")
done
if [ ${#skipped[@]} -gt 0 ]; then
  echo "--- not started within the ${budget}s budget (not counted): ${skipped[*]}"
fi
if [ ${#reports[@]} -eq 0 ]; then
  # Every file had no mutants: nothing to score.
  echo "mutation.sh: no mutants in the files run"
  exit 0
fi
echo "--- mutation table (efficacy = killed / (killed + lived); adjusted leaves out documented equivalents)"
# mutreport is a command of the tools module (.ci/tools), outside the library.
(cd .ci/tools && go run ./mutreport -root "$root" -survivors "$root/docs/contributing/mutation-survivors.md" \
  -threshold "$threshold" "${reports[@]}")

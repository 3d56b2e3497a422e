# Sourced by the multi-node case scripts (launch_test.sh, probe_test.sh, mpirun_test.sh): what
# every case does before and after its own steps. Sets `name` (require_testbed); `fail` reads the
# case's outputs from `$work`.

# require_testbed STATE: the name of the fixture's hosts (fixture.sh writes it as STATE's first
# line) in `name`; exits 77 (skip) with the fixture's reason when it could not make hosts, 1 when
# the fixture did not run.
require_testbed() {
  local state=$1
  [ -f "$state" ] || {
    echo "FAIL: no testbed ($state): the fixture multinode.testbed_up did not run"
    exit 1
  }
  name=$(head -n1 "$state")
  case "$name" in SKIP*) echo "SKIP: ${name#SKIP }"; exit 77 ;; esac
}

# fail MESSAGE: prints it with the end of every output the case kept in $work, and exits 1.
fail() {
  echo "FAIL: $*"
  for f in "$work"/*.out "$work"/*.err; do
    [ -s "$f" ] && { echo "--- $(basename "$f")"; tail -n 40 "$f"; }
  done
  exit 1
}

expect_in() {  # FILE TEXT
  grep -qF -- "$2" "$1" || fail "$(basename "$1") lacks '$2'"
}

#!/bin/sh
# The toy search SPEC's FP8 half ($MOESIM_TINY_FP8_SPEC, written by tests/CMakeLists.txt) narrowed to a
# batch cap of 32 (8 candidates, three verification rounds) by one process and by `mpirun -np 2` (the
# verification rounds spread over the ranks, every rank receiving every round's results): search.csv and
# search.json must be equal byte for byte, and rank 1 must have run points.
# Usage: MOESIM_TINY_FP8_SPEC=FILE mpi_search_test.sh MPIRUN MOESIM WORKDIR
set -eu
mpirun="$1"
moesim="$2"
work="$3"
rm -rf "$work"
mkdir -p "$work"
spec="$work/spec.json"
fp8_spec="${MOESIM_TINY_FP8_SPEC:?set it to the toy SPEC's FP8 half (tests/CMakeLists.txt writes it)}"
tr -d '\n' <"$fp8_spec" |
  sed 's/"max_batch_size": *\[[^]]*\]/"max_batch_size": [32]/' >"$spec"
grep -q '"weights": \["fp8"\]' "$spec" && grep -q '"max_batch_size": \[32\]' "$spec" ||
  { echo "could not narrow the SPEC"; exit 1; }
"$moesim" search "$spec" -j 1 --out "$work/one" >"$work/one.stdout" 2>"$work/one.stderr"
"$mpirun" --allow-run-as-root --oversubscribe -np 2 "$moesim" search "$spec" -j 1 \
  --out "$work/two" >"$work/two.stdout" 2>"$work/two.stderr" || { cat "$work/two.stderr"; exit 1; }
grep -q "rank 1 " "$work/two.stderr" || { echo "rank 1 verified no point:"; cat "$work/two.stderr"; exit 1; }
for f in search.csv search.json; do
  cmp "$work/one/$f" "$work/two/$f" || { echo "$f differs between one process and two ranks"; exit 1; }
done
sed "s#$work/two/#$work/one/#g" "$work/two.stdout" | cmp - "$work/one.stdout" ||
  { echo "the printed front differs"; exit 1; }
echo "search.csv, search.json and the front are equal for 1 process and 2 ranks"

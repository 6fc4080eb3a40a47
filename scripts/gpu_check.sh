#!/usr/bin/env bash
# The GPU check (issue 43), run on a lent GPU machine in one command, from the project root:
#   bash scripts/gpu_check.sh                     # every part, each under its own time limit
#   PARTS="e2e tests" bash scripts/gpu_check.sh   # some of them
# Needs .gpu/ (bash ../shared/gpu/bundle.sh on the developer's machine: egglog and pyscipopt for the GPU
# machine's Python, which reaches no package index). Writes, under $OUT (or /tmp/gpu_check): gpu_check.json (every
# part's exit status, seconds, JSON results and log tail) and gpu_check.log (every part's whole log).
# Parts, in the order they run (a part's limit in seconds: LIMIT_<PART>=N):
#   env     the GPU, driver and versions
#   e2e     scripts/bench_gpu.py: eqsat --runtime torch-cuda against the original in torch-cuda and torch.compile
#   tests   the test suite's GPU paths (the cuda cost, CUDA-graph capture of the built-in models, torch-compile)
#   cost    scripts/bench_cost_model.py: the cuda cost's estimates against end-to-end torch-cuda latency
#   table2  scripts/reproduce.py with --cost cuda (one seed, quick sizes), then scripts/report.py
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
work=$(mktemp -d)
root=$(pwd)
source .gpu/setup-on-device.sh > "$work/setup.log" 2>&1 || { cat "$work/setup.log"; exit 1; }
cat "$work/setup.log"
PARTS=${PARTS:-"env e2e tests cost table2"}
E2E_MODELS=${E2E_MODELS:-nasrnn,squeezenet,nasneta,bert}
COST_MODELS=${COST_MODELS:-nasrnn,squeezenet,resnet50,mobilenetv2,bert,tt,vit-base,inceptionv3,resnext50,nasneta,vgg19,vit-large,vit-huge}
TABLE_MODELS=${TABLE_MODELS:-nasrnn,squeezenet,bert,nasneta,resnext50,mobilenetv2}
TIME_LIMIT=${TIME_LIMIT:-20}  # eqsat's --time-limit in e2e (its default, 45 s, does not fit a 10-minute run)
export EQSAT_CACHE_DIR=${EQSAT_CACHE_DIR:-$work/cache}

part() {  # part NAME COMMAND...: runs COMMAND under the part's limit, its log in $work/NAME.log
  local name=$1; shift
  local var="LIMIT_${name^^}"; local limit=${!var:-120}
  local start=$SECONDS
  echo "== $name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  echo "$name $rc $((SECONDS - start))" >> "$work/parts"
  echo "== $name: exit $rc after $((SECONDS - start))s"; tail -n 25 "$work/$name.log"
}

for p in $PARTS; do
  case $p in
    env) part env bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader;
           python3 -c "import torch, onnxruntime, egglog, pyscipopt, platform, sys;
print(\"python\", sys.version.split()[0], \"torch\", torch.__version__, \"cuda\", torch.version.cuda,
      \"cudnn\", torch.backends.cudnn.version(), \"onnxruntime\", onnxruntime.__version__,
      \"providers\", onnxruntime.get_available_providers(), \"egglog\", egglog.__version__ if hasattr(egglog, \"__version__\") else \"?\",
      \"cpu\", platform.processor() or platform.machine())"' ;;
    e2e) part e2e python3 scripts/bench_gpu.py --models "$E2E_MODELS" --time-limit "$TIME_LIMIT" --budget 2 \
           ${E2E_FLAGS:-} --json "$work/e2e.json" ;;
    tests) part tests bash -c "cd /tmp && python3 -m pytest -q -p no:cacheprovider \
           $root/tests/cost/test_cost.py $root/tests/measurement/test_runtimes.py -k 'cuda or compile or captures or replay'" ;;
    cost) part cost python3 scripts/bench_cost_model.py --runtime torch-cuda --models "$COST_MODELS" \
           --cost cuda,analytic-a100 --programs 2 --search-time 3 --budget 0.5 --json "$work/cost.json" ;;
    table2) part table2 bash -c "python3 scripts/reproduce.py --model $TABLE_MODELS --seeds 0 --configs ours \
           --quick --cost cuda --time-limit 20 --jobs 1 --out $work/table2 && python3 scripts/reproduce.py --model $TABLE_MODELS \
           --seeds 0 --configs tensat --quick --cost cuda --time-limit 20 --jobs 1 --out $work/table2; \
           python3 scripts/report.py $work/table2 -o $work/table2-report && cat $work/table2-report/*.md" ;;
    *) echo "unknown part $p" ;;
  esac
done

python3 - "$work" "$OUT" <<'EOF'
import glob, json, os, sys
work, out = sys.argv[1:]
result = {"parts": {}}
for line in open(os.path.join(work, "parts")).read().split("\n") if os.path.exists(os.path.join(work, "parts")) else []:
    if not line.strip():
        continue
    name, rc, seconds = line.split()
    log = open(os.path.join(work, f"{name}.log"), errors="replace").read()
    entry = {"rc": int(rc), "seconds": int(seconds), "log_tail": log[-6000:]}
    path = os.path.join(work, f"{name}.json")
    if os.path.exists(path):
        entry["json"] = json.load(open(path))
    for md in glob.glob(os.path.join(work, f"{name}-report", "*.md")):
        entry.setdefault("markdown", {})[os.path.basename(md)] = open(md).read()
    result["parts"][name] = entry
json.dump(result, open(os.path.join(out, "gpu_check.json"), "w"), indent=1, default=str)
with open(os.path.join(out, "gpu_check.log"), "w") as f:
    for name in result["parts"]:
        f.write(f"===== {name}\n" + open(os.path.join(work, f"{name}.log"), errors="replace").read())
print("wrote", os.path.join(out, "gpu_check.json"))
EOF

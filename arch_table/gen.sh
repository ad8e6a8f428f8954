#!/bin/sh
# Generates the C row arrays of arch_table from its TSV data files.
#
#   sh arch_table/gen.sh OUT.c DATADIR
#
# Every table is checked before anything is written: header, column count,
# value syntax, conf (C/S/U), source keys (must be listed in sources.tsv),
# duplicate keys. On any error the messages name file:line, OUT.c is left
# untouched and the exit status is 1. POSIX sh + POSIX awk only (runs under
# dash and mawk), so a build host needs nothing beyond the base system.
set -u

if [ $# -ne 2 ]; then
  echo "usage: sh arch_table/gen.sh OUT.c DATADIR" >&2
  exit 2
fi
out=$1
dir=$2

# sources.tsv comes first: the other tables are checked against its keys.
tables="sources cc toolkit ptx_isa mvc driver_branch nvrtc libreq torch cuda_errors arch_support"

if [ ! -d "$dir" ]; then
  echo "gen.sh: $dir: not a directory (expected arch_table/data)" >&2
  exit 1
fi

# A .tsv that no table claims would be silently ignored; refuse it instead.
for f in "$dir"/*.tsv; do
  [ -e "$f" ] || continue
  base=${f##*/}
  base=${base%.tsv}
  known=0
  for t in $tables; do
    [ "$t" = "$base" ] && known=1
  done
  if [ $known -eq 0 ]; then
    echo "gen.sh: $f: unknown table '$base' (known: $tables); add it to gen.sh or remove the file" >&2
    exit 1
  fi
done

set --
for t in $tables; do
  if [ ! -f "$dir/$t.tsv" ]; then
    echo "gen.sh: $dir/$t.tsv: missing; every table must exist" >&2
    exit 1
  fi
  set -- "$@" "$dir/$t.tsv"
done

prog='
# Column specs: "name:type" in TSV order, which is also the C struct field order.
function spec_init() {
  spec["sources"] = "key:word where:str url:url"
  keycols["sources"] = "1"
  ctype["sources"] = "em_source_row"; cname["sources"] = "em_at_source"

  spec["cc"] = "cc:cc arch:str codename:str0 gpus:str0 tegra:bool features:feat first_toolkit:cuda last_toolkit:cuda0 conf:conf source:source"
  keycols["cc"] = "1"
  ctype["cc"] = "em_arch_row"; cname["cc"] = "em_at_arch"

  spec["toolkit"] = "cuda:cuda ptx_isa:isa targets:targets linux_driver:drv windows_driver:drv0 conf:conf source:source"
  keycols["toolkit"] = "1"
  ctype["toolkit"] = "em_toolkit_row"; cname["toolkit"] = "em_at_toolkit"

  spec["ptx_isa"] = "ptx_isa:isa min_cuda:cuda conf:conf source:source"
  keycols["ptx_isa"] = "1"
  ctype["ptx_isa"] = "em_at_ptx_isa_row"; cname["ptx_isa"] = "em_at_ptx_isa"

  spec["mvc"] = "cuda_major:int os:os min_driver:drv conf:conf source:source"
  keycols["mvc"] = "1 2"
  ctype["mvc"] = "em_at_mvc_row"; cname["mvc"] = "em_at_mvc"

  spec["driver_branch"] = "branch:int cuda:cuda conf:conf source:source"
  keycols["driver_branch"] = "1"
  ctype["driver_branch"] = "em_driver_branch_row"; cname["driver_branch"] = "em_at_driver_branch"

  spec["nvrtc"] = "soname:word cuda_low:cuda cuda_high:cudahi has_get_cubin:bool has_supported_archs:bool conf:conf source:source"
  keycols["nvrtc"] = "1"
  ctype["nvrtc"] = "em_nvrtc_row"; cname["nvrtc"] = "em_at_nvrtc"

  spec["libreq"] = "library:word version:word built_for_cuda:cuda0 lowest_cc:cc linux_driver:drv0 conf:conf source:source"
  keycols["libreq"] = "1 2 3"
  ctype["libreq"] = "em_libreq_row"; cname["libreq"] = "em_at_libreq"

  spec["torch"] = "release:word variant:word cuda:cuda arch_list:archlist conf:conf source:source"
  keycols["torch"] = "1 2"
  ctype["torch"] = "em_torch_row"; cname["torch"] = "em_at_torch"

  spec["cuda_errors"] = "api:api number:int name:ident description:str message:str0 causes:str0 check:str0 pains:pains conf:conf source:source"
  keycols["cuda_errors"] = "1 2"
  ctype["cuda_errors"] = "em_cuda_error_row"; cname["cuda_errors"] = "em_at_cuda_error"

  spec["arch_support"] = "arch:str last_branch:int conf:conf source:source"
  keycols["arch_support"] = "1"
  ctype["arch_support"] = "em_arch_support_row"; cname["arch_support"] = "em_at_arch_support"

  order = "sources cc toolkit ptx_isa mvc driver_branch nvrtc libreq torch cuda_errors arch_support"

  nfeat = split("fp16 tensor bf16 tf32 fp8 dp4a", featname, " ")
  split("EM_FEAT_FP16_ARITH EM_FEAT_TENSOR_CORES EM_FEAT_BF16 EM_FEAT_TF32 EM_FEAT_FP8 EM_FEAT_INT8_DP4A", featmacro, " ")
}

function err(msg) {
  printf "gen.sh: %s:%d: %s\n", FILENAME, FNR, msg > "/dev/stderr"
  nerr++
}

# C string literal. Char by char because backslashes in awk gsub replacements
# differ between awk implementations. "?" is escaped so no trigraph can form.
function cstr(s,   i, c, r) {
  r = ""
  for (i = 1; i <= length(s); i++) {
    c = substr(s, i, 1)
    if (c == "\\" || c == "\"") r = r "\\" c
    else if (c == "?") r = r "\\?"
    else r = r c
  }
  return "\"" r "\""
}

function majmin(v, mul_major, mul_minor,   p) {
  split(v, p, ".")
  return p[1] * mul_major + p[2] * mul_minor
}

# Converts field v of type ty into a C initializer; "" (with an error) if invalid.
function conv(v, ty, name,   n, parts, i, flags, found, j) {
  if (ty == "str") {
    if (v == "-") { err(name ": \"-\" is not allowed here, a value is required"); return "" }
    return cstr(v)
  }
  if (ty == "str0") return (v == "-") ? cstr("") : cstr(v)
  if (ty == "word") {
    if (v !~ /^[A-Za-z0-9][A-Za-z0-9._+-]*$/) { err(name ": \"" v "\" is not a plain word (letters, digits, . _ + -)"); return "" }
    return cstr(v)
  }
  if (ty == "int") {
    if (v !~ /^[0-9]+$/ || length(v) > 6) { err(name ": \"" v "\" is not a non-negative integer"); return "" }
    return v + 0
  }
  if (ty == "bool") {
    if (v !~ /^[01]$/) { err(name ": \"" v "\" must be 0 or 1"); return "" }
    return v
  }
  if (ty == "cc" || ty == "isa") {
    if (v !~ /^[0-9][0-9]?\.[0-9]$/) { err(name ": \"" v "\" must be MAJOR.MINOR with a one-digit minor, e.g. 8.6"); return "" }
    return majmin(v, 10, 1)
  }
  if (ty == "cuda0" && v == "-") return 0
  if (ty == "cudahi" && v ~ /^[0-9][0-9]?\.x$/) {
    split(v, parts, ".")
    return parts[1] * 1000 + 990
  }
  if (ty == "cuda" || ty == "cuda0" || ty == "cudahi") {
    if (v !~ /^[0-9][0-9]?\.[0-9]$/) { err(name ": \"" v "\" must be a CUDA version MAJOR.MINOR, e.g. 12.8" (ty == "cuda0" ? " (or - for none)" : "") (ty == "cudahi" ? " (or MAJOR.x for every minor)" : "")); return "" }
    return majmin(v, 1000, 10)
  }
  if (ty == "drv0" && v == "-") return cstr("")
  if (ty == "drv" || ty == "drv0") {
    if (v !~ /^[0-9]+(\.[0-9]+)*$/) { err(name ": \"" v "\" is not a driver version like 535.54.03" (ty == "drv0" ? " (or - for none)" : "")); return "" }
    return cstr(v)
  }
  if (ty == "os") {
    if (v != "linux" && v != "windows") { err(name ": \"" v "\" must be linux or windows"); return "" }
    return cstr(v)
  }
  if (ty == "targets") {
    if (v !~ /^[0-9]+[af]?(,[0-9]+[af]?)*$/) { err(name ": \"" v "\" must be SM numbers separated by commas, each optionally with a or f (75,90a,100f)"); return "" }
    return cstr(v)
  }
  if (ty == "archlist") {
    if (v !~ /^[0-9][0-9]?\.[0-9](;[0-9][0-9]?\.[0-9])*(\+PTX)?$/) { err(name ": \"" v "\" must look like 7.5;8.0;9.0 with an optional +PTX at the end"); return "" }
    return cstr(v)
  }
  if (ty == "feat") {
    if (v == "-") return "0u"
    n = split(v, parts, ",")
    flags = ""
    for (i = 1; i <= n; i++) {
      found = 0
      for (j = 1; j <= nfeat; j++) if (parts[i] == featname[j]) found = j
      if (!found) { err(name ": unknown feature \"" parts[i] "\" (known: fp16 tensor bf16 tf32 fp8 dp4a, or - for none)"); return "" }
      flags = flags (flags == "" ? "" : " | ") featmacro[found]
    }
    return flags
  }
  if (ty == "api") {
    if (v != "driver" && v != "runtime" && v != "nvml") { err(name ": \"" v "\" must be driver (CUresult), runtime (cudaError_t) or nvml (nvmlReturn_t)"); return "" }
    return cstr(v)
  }
  if (ty == "ident") {
    if (v !~ /^[A-Za-z_][A-Za-z0-9_]*$/) { err(name ": \"" v "\" is not a C identifier"); return "" }
    return cstr(v)
  }
  if (ty == "url") {
    if (v == "-") return cstr("")
    if (v !~ /^https:\/\/[^ \t"\\]+$/) { err(name ": \"" v "\" must be - or one https:// address without spaces (the page a user can open)"); return "" }
    return cstr(v)
  }
  if (ty == "pains") {
    if (v == "-") return cstr("")
    if (v !~ /^P([1-9]|10)(,P([1-9]|10))*$/) { err(name ": \"" v "\" must be - or pains P1 to P10 of gpucheck-anchors.md section 2, separated by commas (P1,P7)"); return "" }
    return cstr(v)
  }
  if (ty == "conf") {
    if (v !~ /^[CSU]$/) { err(name ": \"" v "\" must be C (confirmed), S (secondary) or U (unconfirmed)"); return "" }
    return "\047" v "\047"
  }
  if (ty == "source") {
    if (v == "-") { err(name ": the source is missing; name at least one key from sources.tsv"); return "" }
    n = split(v, parts, ",")
    for (i = 1; i <= n; i++) {
      if (!(parts[i] in srckey)) { err(name ": unknown source key \"" parts[i] "\"; add it to sources.tsv with its URL or repo:path"); return "" }
    }
    return cstr(v)
  }
  err("internal: unknown column type " ty)
  return ""
}

# cuda_errors.tsv: the name fits its API, names are unique whatever their case
# (gpucheck explain matches them so), causes and check come together, and
# "=driver" in a runtime row takes the text of the driver row of the same
# number, which must come earlier in the file. Returns 0 after an error.
function cuda_error_checks(   lname, c) {
  if ($1 == "driver" && $3 !~ /^CUDA_(SUCCESS$|ERROR_)/) { err("name: a driver (CUresult) name is CUDA_SUCCESS or starts with CUDA_ERROR_"); return 0 }
  if ($1 == "runtime" && $3 !~ /^cuda(Success$|Error[A-Z])/) { err("name: a runtime (cudaError_t) name is cudaSuccess or starts with cudaError"); return 0 }
  if ($1 == "nvml" && $3 !~ /^NVML_(SUCCESS$|ERROR_)/) { err("name: an nvml (nvmlReturn_t) name is NVML_SUCCESS or starts with NVML_ERROR_"); return 0 }
  lname = tolower($3)
  if (lname in errname) { err("name: " $3 " repeats line " errname[lname] " (names are matched case-insensitively)"); return 0 }
  if (($6 == "-") != ($7 == "-")) { err("causes and check: write both or neither (- for none)"); return 0 }
  for (c = 6; c <= 7; c++) {
    if ($c != "=driver") continue
    if ($1 != "runtime") { err(colname[c] ": =driver is only for runtime rows"); return 0 }
    if (!(($2, c) in drvtext)) { err(colname[c] ": =driver, but no driver row with number " $2 " and this text comes earlier in the file"); return 0 }
    val[c] = drvtext[$2, c]
  }
  errname[lname] = FNR
  if ($1 == "driver" && $6 != "-") { drvtext[$2, 6] = val[6]; drvtext[$2, 7] = val[7] }
  return 1
}

BEGIN { FS = "\t"; nerr = 0; spec_init() }

FNR == 1 {
  t = FILENAME
  sub(/^.*\//, "", t)
  sub(/\.tsv$/, "", t)
  ncol = split(spec[t], colspec, " ")
  want = ""
  wantsp = ""
  for (i = 1; i <= ncol; i++) {
    split(colspec[i], cs, ":")
    colname[i] = cs[1]; coltype[i] = cs[2]
    want = want (i > 1 ? "\t" : "") cs[1]
    wantsp = wantsp (i > 1 ? " " : "") cs[1]
  }
  nkey = split(keycols[t], kc, " ")
  rows[t] = 0
  hdr = $0
  sub(/\r$/, "", hdr)
  if (hdr != want) err("header must be exactly these names separated by single tabs: " wantsp)
  next
}

/^#/ || /^[ \t]*\r?$/ { next }

{
  if ($0 ~ /\r$/) { err("line ends in CR (Windows line ending); save the file with LF endings"); next }
  notabs = $0
  gsub(/\t/, "", notabs)
  if (notabs ~ /[[:cntrl:]]/) { err("control character in the row (only tabs separate columns)"); next }
  if (NF != ncol) { err("expected " ncol " tab-separated columns (" wantsp "), found " NF); next }
  row = ""
  bad = 0
  for (i = 1; i <= ncol; i++) {
    if ($i == "") { err(colname[i] ": empty field; write - for none where that is allowed"); bad = 1; continue }
    if ($i ~ /^ | $/) { err(colname[i] ": leading or trailing space in \"" $i "\""); bad = 1; continue }
    before = nerr
    c = conv($i, coltype[i], colname[i])
    if (nerr != before) { bad = 1; continue }
    val[i] = c
    row = row (i > 1 ? ", " : "") c
  }
  if (bad) next

  k = t
  for (i = 1; i <= nkey; i++) k = k SUBSEP $(kc[i])
  if (k in seen) { err("duplicate row: the key columns repeat line " seen[k]); next }
  seen[k] = FNR

  if (t == "sources") srckey[$1] = 1

  # Checks across columns.
  if (t == "cc" && val[8] != 0 && val[8] < val[7]) { err("last_toolkit is older than first_toolkit"); next }
  if (t == "nvrtc") {
    if (val[3] < val[2]) { err("cuda_high is older than cuda_low"); next }
    if (rows[t] > 0 && val[2] >= last_nvrtc_low) { err("rows must be newest first (cuda_low below the previous row)"); next }
    last_nvrtc_low = val[2]
  }
  if (t == "cuda_errors") {
    if (!cuda_error_checks()) next
    row = val[1]
    for (i = 2; i <= ncol; i++) row = row ", " val[i]
  }

  rows[t]++
  body[t] = body[t] "  {" row "},\n"
}

END {
  for (i = 1; i <= split(order, ord, " "); i++) {
    t = ord[i]
    if (rows[t] == 0 && nerr == 0) {
      printf "gen.sh: %s.tsv: no rows; a table needs at least one\n", t > "/dev/stderr"
      nerr++
    }
  }
  if (nerr > 0) {
    printf "gen.sh: %d error(s); nothing written\n", nerr > "/dev/stderr"
    exit 1
  }
  print "/* Generated by arch_table/gen.sh from the TSV files in arch_table/data. Do not edit:"
  print " * change the TSV files and rebuild. */"
  print "#include \"arch_table_data.h\""
  for (i = 1; i <= split(order, ord, " "); i++) {
    t = ord[i]
    printf "\n/* %s.tsv */\nconst %s %s_rows[] = {\n%s};\n", t, ctype[t], cname[t], body[t]
    printf "const size_t %s_count = sizeof %s_rows / sizeof %s_rows[0];\n", cname[t], cname[t], cname[t]
  }
}
'

outdir=$(dirname -- "$out")
mkdir -p -- "$outdir" || exit 1
tmp="$out.tmp.$$"
if LC_ALL=C awk "$prog" "$@" > "$tmp"; then
  mv -f -- "$tmp" "$out"
else
  rm -f -- "$tmp"
  exit 1
fi

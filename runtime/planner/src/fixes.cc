// parse_fixes: the `--fix k=v,...` syntax.
#include <charconv>
#include <set>
#include <string>

#include "tessera/common/env.h"
#include "tessera/plan/search.h"

namespace tessera::plan {
namespace {

Result<int> positive(std::string_view key, std::string_view value, int min, int max) {
  int v = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || v < min || v > max) {
    return invalid_argument("--fix: " + std::string(key) + " must be an integer in " +
                            std::to_string(min) + ".." + std::to_string(max) + ", got '" +
                            std::string(value) + "'");
  }
  return v;
}

}  // namespace

Status parse_fixes(std::string_view text, SearchConstraints* out) {
  std::set<std::string> seen;
  for (const std::string& item : env::split(text, ",")) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return invalid_argument("--fix: '" + item + "' is not key=value");
    }
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    // tp=8,tp=1 would silently keep the last: a typo, not a choice.
    if (!seen.insert(key).second) {
      return invalid_argument("--fix: '" + key + "' given twice");
    }
    constexpr int kMax = 1 << 20;
    if (key == "tp" || key == "pp" || key == "dp" || key == "vp" || key == "mbs" || key == "cp" ||
        key == "ep") {
      TSR_ASSIGN_OR_RETURN(int v, positive(key, value, 1, kMax));
      std::optional<int>* slot = key == "tp"    ? &out->tp
                                 : key == "pp"  ? &out->pp
                                 : key == "dp"  ? &out->dp
                                 : key == "vp"  ? &out->vp
                                 : key == "mbs" ? &out->mbs
                                 : key == "cp"  ? &out->cp
                                                : &out->ep;
      *slot = v;
    } else if (key == "zero") {
      TSR_ASSIGN_OR_RETURN(out->zero, positive(key, value, 0, 3));
    } else if (key == "sp") {
      TSR_ASSIGN_OR_RETURN(int v, positive(key, value, 0, 1));
      out->sp = v == 1;
    } else if (key == "recompute") {
      if (value == "none")
        out->recompute = Recompute::kNone;
      else if (value == "selective")
        out->recompute = Recompute::kSelective;
      else if (value == "full")
        out->recompute = Recompute::kFull;
      else {
        return invalid_argument("--fix: recompute must be none, selective or full, got '" + value +
                                "'");
      }
    } else {
      return invalid_argument("--fix: unknown key '" + key +
                              "' (known: tp pp dp vp mbs zero recompute sp cp ep)");
    }
  }
  return Status();
}

}  // namespace tessera::plan

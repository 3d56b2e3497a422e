// `tessera ckpt ls|inspect|verify|diff|reshard`: look into checkpoint directories written by
// runtime/checkpoint, and rewrite one for another parallel layout. Every subcommand takes --json.
// Exit status: 0 success (diff: identical), 1 verification failed, (diff) the checkpoints
// differ or (ls, verify) `latest` names no checkpoint, 2 bad arguments or unreadable input.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"

#ifdef TESSERA_HAVE_CHECKPOINT
#include "format.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/manifest.h"
#include "tessera/checkpoint/reshard.h"
#endif

namespace tessera::tools {

#ifndef TESSERA_HAVE_CHECKPOINT

void add_ckpt_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("ckpt", "Inspect checkpoints (not built: needs zstd, xxhash)");
  cmd->allow_extras();
  cmd->callback([] {
    std::fprintf(stderr,
                 "tessera ckpt: this build has no checkpointer (libzstd-dev and libxxhash-dev "
                 "were not found; see scripts/setup.sh)\n");
    throw CLI::RuntimeError(2);
  });
}

#else

namespace {

using Json = nlohmann::ordered_json;
namespace fsys = std::filesystem;

[[noreturn]] void fail(const std::string& sub, const Status& status, int code = 2) {
  std::fprintf(stderr, "tessera ckpt %s: %s\n", sub.c_str(), status.to_string().c_str());
  throw CLI::RuntimeError(code);
}

// The N of "step-N"; fails the command naming `path` when it does not fit in int64
// (std::stoll would throw out_of_range and abort the command).
int64_t step_number(const std::string& sub, std::string_view digits, const std::string& path) {
  int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    fail(sub, invalid_argument("'" + path + "': step number '" + std::string(digits) +
                               "' is out of range"));
  }
  return step;
}

// "DIR" (the step `latest` names, or every step with all=true) or "DIR/step-N".
struct Target {
  std::string root;
  std::vector<int64_t> steps;
  bool whole_dir = false;  // DIR was given (not DIR/step-N)
};

Target resolve(const std::string& sub, const std::string& path, bool all_steps) {
  fsys::path p = fsys::path(path).lexically_normal();
  if (p.has_filename() == false) p = p.parent_path();
  const std::string name = p.filename().string();
  if (name.rfind("step-", 0) == 0 && fsys::exists(p / "manifest.json")) {
    const std::string digits = name.substr(5);
    if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos) {
      return Target{p.parent_path().string(), {step_number(sub, digits, path)}};
    }
  }
  if (!fsys::is_directory(p)) fail(sub, not_found("'" + path + "' is not a directory"));
  Target t{p.string(), {}, true};
  if (all_steps) {
    auto steps = ckpt::list_steps(t.root);
    if (!steps.ok()) fail(sub, steps.status());
    for (const auto& s : *steps) {
      if (s.committed) t.steps.push_back(s.step);
    }
    if (t.steps.empty()) fail(sub, not_found("no committed checkpoint in '" + path + "'"));
    return t;
  }
  auto latest = ckpt::read_latest_committed(t.root);
  if (!latest.ok()) fail(sub, latest.status());
  t.steps.push_back(*latest);
  return t;
}

// What `latest` says about DIR's steps: a step is published (a checkpoint) when it is a step-N/
// directory with N <= the step `latest` names and that step exists. `problem` is set when the
// directory's state is not what a load expects: `latest` malformed, naming nothing, or missing
// while step directories exist.
struct Published {
  std::optional<int64_t> latest;
  Status problem;
  bool published(const ckpt::StepInfo& s) const {
    return s.committed && latest && s.step <= *latest;
  }
};

Published read_published(const std::string& dir, const std::vector<ckpt::StepInfo>& steps) {
  Published p;
  auto latest = ckpt::read_latest_committed(dir);
  if (latest.ok()) {
    p.latest = *latest;
  } else if (latest.status().code() != StatusCode::kNotFound) {
    p.problem = latest.status();
  } else if (std::any_of(steps.begin(), steps.end(), [](const auto& s) { return s.committed; })) {
    p.problem = data_loss("no 'latest' in '" + dir +
                          "': no step is published (a save interrupted "
                          "before it wrote `latest`)");
  }
  return p;
}

std::string state_text(const ckpt::StepInfo& s, const Published& p) {
  if (!s.committed) return "unfinished (.tmp)";
  if (!p.published(s)) return p.latest ? "unpublished (newer than latest)" : "unpublished";
  return *p.latest == s.step ? "committed, latest" : "committed";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

uint64_t tensor_raw(const ckpt::TensorRecord& t) {
  uint64_t n = 0;
  for (const auto& s : t.shards) {
    for (const auto& c : s.chunks) n += c.raw;
  }
  return n;
}

void run_ls(const std::string& dir, bool json) {
  auto steps = ckpt::list_steps(dir);
  if (!steps.ok()) fail("ls", steps.status());
  const Published pub = read_published(dir, *steps);
  Json out = Json::array();
  Table table({"step", "state", "kind", "size", "ranks", "layout"});
  for (const auto& s : *steps) {
    Json row = {{"step", s.step},
                {"dir", s.dir},
                {"committed", pub.published(s)},
                {"latest", pub.published(s) && *pub.latest == s.step},
                {"state", state_text(s, pub)}};
    std::string kind = "-", size = "-", ranks = "-", layout = "-";
    if (s.committed) {
      auto m = ckpt::read_manifest(dir, s.step);
      if (m.ok()) {
        row["kind"] = m->delta ? "delta" : "full";
        if (m->delta) row["base_step"] = m->base_step;
        row["bytes"] = m->bytes_stored();
        row["raw_bytes"] = m->bytes_raw();
        row["world_size"] = m->world_size;
        row["layout"] = m->layout;
        kind = m->delta ? "delta of " + std::to_string(m->base_step) : "full";
        size = format_bytes(m->bytes_stored());
        ranks = std::to_string(m->world_size);
        layout = m->layout.empty() ? "-" : m->layout;
      } else {
        row["error"] = m.status().to_string();
        kind = "unreadable manifest";
      }
    }
    out.push_back(row);
    table.add({std::to_string(s.step), state_text(s, pub), kind, size, ranks, layout});
  }
  if (json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << table.to_string();
  }
  // The listing is still printed: it is what one needs to repair `latest`.
  if (!pub.problem.ok()) fail("ls", pub.problem, 1);
}

Json manifest_summary(const ckpt::Manifest& m, bool shards) {
  Json j = {{"step", m.step},
            {"kind", m.delta ? "delta" : "full"},
            {"base_step", m.base_step},
            {"world_size", m.world_size},
            {"layout", m.layout},
            {"created_unix_s", m.created_unix_s},
            {"bytes", m.bytes_stored()},
            {"raw_bytes", m.bytes_raw()}};
  j["metadata"] = Json::object();
  for (const auto& [k, v] : m.metadata) j["metadata"][k] = v;
  j["tensors"] = Json::array();
  for (const auto& t : m.tensors) {
    Json tj = {{"name", t.name},
               {"dtype", t.dtype},
               {"shape", t.shape},
               {"bytes", tensor_raw(t)},
               {"shards", t.shards.size()}};
    if (shards) {
      tj["shard_list"] = Json::array();
      for (const auto& s : t.shards) {
        std::map<std::string, int> encodings;
        for (const auto& c : s.chunks) ++encodings[c.enc];
        tj["shard_list"].push_back({{"rank", s.rank},
                                    {"offset", s.slice.offset},
                                    {"len", s.slice.len},
                                    {"chunks", s.chunks.size()},
                                    {"encodings", encodings}});
      }
    }
    j["tensors"].push_back(std::move(tj));
  }
  j["blobs"] = Json::array();
  for (const auto& b : m.blobs) {
    j["blobs"].push_back(
        {{"name", b.name}, {"rank", b.rank}, {"replicated", b.replicated}, {"size", b.size}});
  }
  j["files"] = Json::array();
  for (const auto& f : m.files) {
    j["files"].push_back(
        {{"name", f.name}, {"size", f.size}, {"checksum", ckpt::hex64(f.checksum)}});
  }
  return j;
}

void run_inspect(const std::string& path, bool json) {
  Target t = resolve("inspect", path, false);
  auto m = ckpt::read_manifest(t.root, t.steps[0]);
  if (!m.ok()) fail("inspect", m.status());
  if (json) {
    std::cout << manifest_summary(*m, true).dump(2) << "\n";
    return;
  }
  std::cout << ckpt::step_dir_name(m->step) << ": "
            << (m->delta ? "delta of step " + std::to_string(m->base_step) : "full") << ", "
            << m->world_size << (m->world_size == 1 ? " rank, " : " ranks, ")
            << format_bytes(m->bytes_stored()) << " stored for " << format_bytes(m->bytes_raw())
            << " of state" << (m->layout.empty() ? "" : ", layout " + m->layout) << "\n";
  for (const auto& [k, v] : m->metadata) std::cout << "  " << k << " = " << v << "\n";
  Table tensors({"tensor", "dtype", "shape", "bytes", "shards (rank slice chunks)"});
  for (const auto& tr : m->tensors) {
    std::string shards;
    for (const auto& s : tr.shards) {
      shards += (shards.empty() ? "" : "  ") + std::to_string(s.rank) + ":" +
                ckpt::slice_text(s.slice) + "x" + std::to_string(s.chunks.size());
    }
    tensors.add({tr.name, tr.dtype, shape_text(tr.shape), format_bytes(tensor_raw(tr)), shards});
  }
  std::cout << tensors.to_string();
  for (const auto& b : m->blobs) {
    std::cout << "blob " << b.name << " (rank " << b.rank << (b.replicated ? ", replicated" : "")
              << "): " << b.size << " bytes\n";
  }
}

void run_verify(const std::string& path, bool json) {
  Target t = resolve("verify", path, true);
  const bool bar = !json && ::isatty(STDERR_FILENO);
  Json out = Json::array();
  bool all_ok = true;
  // DIR: `latest` is part of the checkpoint. Steps newer than it are verified too, but labelled:
  // they are not checkpoints a load would take.
  std::optional<Published> pub;
  if (t.whole_dir) {
    auto steps = ckpt::list_steps(t.root);
    if (!steps.ok()) fail("verify", steps.status());
    pub = read_published(t.root, *steps);
  }
  for (int64_t step : t.steps) {
    Status status;
    auto m = ckpt::read_manifest(t.root, step);
    if (!m.ok()) {
      status = m.status();
    } else {
      status = ckpt::verify_checkpoint(t.root, *m, [&](uint64_t done, uint64_t total) {
        if (!bar || total == 0) return;
        const int width = 40, filled = static_cast<int>(width * done / total);
        std::fprintf(stderr, "\r%s [%s%s] %3d%%", ckpt::step_dir_name(step).c_str(),
                     std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
                     static_cast<int>(100 * done / total));
      });
      if (bar) std::fprintf(stderr, "\r%60s\r", "");
    }
    all_ok = all_ok && status.ok();
    const bool published = !pub || pub->published(ckpt::StepInfo{step, true, ""});
    out.push_back({{"step", step},
                   {"ok", status.ok()},
                   {"published", published},
                   {"error", status.ok() ? "" : status.to_string()}});
    if (!json) {
      if (status.ok()) {
        std::cout << ckpt::step_dir_name(step) << ": OK"
                  << (published ? "" : " (unpublished: not named by latest)") << "\n";
      } else {
        std::fprintf(stderr, "tessera ckpt verify: %s: %s\n", ckpt::step_dir_name(step).c_str(),
                     status.to_string().c_str());
      }
    }
  }
  if (json) std::cout << out.dump(2) << "\n";
  if (pub && !pub->problem.ok()) fail("verify", pub->problem, 1);
  if (!all_ok) throw CLI::RuntimeError(1);
}

// Reads one whole tensor of a checkpoint into memory (resharding whatever layout it has).
Result<std::vector<std::byte> > read_whole(const std::string& root, int64_t step,
                                           const ckpt::TensorRecord& t) {
  ckpt::CheckpointOptions o;
  o.dir = root;
  TSR_ASSIGN_OR_RETURN(auto ck,
                       ckpt::Checkpointer::create(o, std::make_shared<ckpt::SingleRankGroup>()));
  auto dtype = hal::parse_dtype(t.dtype);
  if (!dtype) return data_loss("tensor '" + t.name + "': unknown dtype '" + t.dtype + "'");
  const ckpt::Slice whole = ckpt::full_slice(t.shape);
  std::vector<std::byte> data(static_cast<size_t>(whole.elements()) * hal::dtype_size(*dtype));
  TSR_RETURN_IF_ERROR(ck->registry().add_host_tensor(t.name, *dtype, t.shape, whole, data.data()));
  ckpt::LoadOptions lo;
  lo.step = step;
  TSR_ASSIGN_OR_RETURN(auto loaded, ck->load(lo));
  return data;
}

void run_diff(const std::string& a, const std::string& b, bool json) {
  Target ta = resolve("diff", a, false), tb = resolve("diff", b, false);
  auto ma = ckpt::read_manifest(ta.root, ta.steps[0]);
  if (!ma.ok()) fail("diff", ma.status());
  auto mb = ckpt::read_manifest(tb.root, tb.steps[0]);
  if (!mb.ok()) fail("diff", mb.status());
  Json out = Json::array();
  bool same = true;
  auto note = [&](const std::string& name, const std::string& what, Json extra = Json::object()) {
    same = same && what == "same";
    extra["tensor"] = name;
    extra["result"] = what;
    out.push_back(extra);
    if (!json) std::cout << name << ": " << what << "\n";
  };
  for (const auto& t : ma->tensors) {
    const ckpt::TensorRecord* u = mb->find_tensor(t.name);
    if (u == nullptr) {
      note(t.name, "only in A");
      continue;
    }
    if (u->dtype != t.dtype || u->shape != t.shape) {
      note(t.name, "differs in dtype or shape: " + t.dtype + shape_text(t.shape) + " vs " +
                       u->dtype + shape_text(u->shape));
      continue;
    }
    auto da = read_whole(ta.root, ta.steps[0], t);
    if (!da.ok()) fail("diff", da.status());
    auto db = read_whole(tb.root, tb.steps[0], *u);
    if (!db.ok()) fail("diff", db.status());
    const size_t esize = hal::dtype_size(*hal::parse_dtype(t.dtype));
    uint64_t differing = 0;
    int64_t first = -1;
    for (size_t e = 0; e * esize < da->size(); ++e) {
      if (std::memcmp(da->data() + e * esize, db->data() + e * esize, esize) != 0) {
        if (first < 0) first = static_cast<int64_t>(e);
        ++differing;
      }
    }
    if (differing == 0) {
      note(t.name, "same");
    } else {
      note(t.name,
           "differs in " + std::to_string(differing) + " of " + std::to_string(da->size() / esize) +
               " elements (first at flat index " + std::to_string(first) + ")",
           {{"differing_elements", differing}, {"first_index", first}});
    }
  }
  for (const auto& u : mb->tensors) {
    if (ma->find_tensor(u.name) == nullptr) note(u.name, "only in B");
  }
  if (json) std::cout << out.dump(2) << "\n";
  if (!same) throw CLI::RuntimeError(1);
}

struct ReshardArgs {
  std::string src, plan, out;
  int plan_index = 0;
  int zstd_level = -1;
  bool no_fsync = false, json = false;
};

void run_reshard(const ReshardArgs& a) {
  // SRC is DIR (the step `latest` names) or DIR/step-N (also DIR/step-N.tmp, refused as
  // uncommitted by the library with its own message).
  ckpt::ReshardOptions o;
  std::string root = a.src;
  {
    fsys::path p = fsys::path(a.src).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();
    std::string name = p.filename().string();
    if (name.size() > 4 && name.ends_with(".tmp")) name.resize(name.size() - 4);
    if (name.rfind("step-", 0) == 0 && name.size() > 5 &&
        name.find_first_not_of("0123456789", 5) == std::string::npos) {
      root = p.parent_path().string();
      if (root.empty()) root = ".";
      o.step = step_number("reshard", std::string_view(name).substr(5), a.src);
    }
  }
  std::ifstream file(a.plan);
  if (!file) fail("reshard", not_found("--to '" + a.plan + "': cannot read the file"));
  std::stringstream text;
  text << file.rdbuf();
  auto layout =
      ckpt::parse_layout_json(text.str(), "'" + a.plan + "'", a.plan_index, &o.placements);
  if (!layout.ok()) fail("reshard", layout.status());
  o.to = *layout;
  o.zstd_level = a.zstd_level;
  o.fsync = !a.no_fsync;
  const bool bar = !a.json && ::isatty(STDERR_FILENO);
  if (bar) {
    o.progress = [](uint64_t done, uint64_t total) {
      if (total == 0) return;
      done = std::min(done, total);
      const int width = 40, filled = static_cast<int>(width * done / total);
      std::fprintf(stderr, "\rreshard [%s%s] %3d%%", std::string(filled, '#').c_str(),
                   std::string(width - filled, ' ').c_str(), static_cast<int>(100 * done / total));
    };
  }
  auto r = ckpt::reshard_checkpoint(root, a.out, o);
  if (bar) std::fprintf(stderr, "\r%60s\r", "");
  if (!r.ok()) fail("reshard", r.status(), r.status().code() == StatusCode::kDataLoss ? 1 : 2);
  if (a.json) {
    Json j = {{"step", r->step},
              {"out", a.out},
              {"layout", o.to.text()},
              {"world_size", r->world_size},
              {"bytes_read", r->bytes_read},
              {"chunks_read", r->chunks_read},
              {"bytes_written", r->bytes_written},
              {"raw_bytes", r->bytes_raw},
              {"whole_tensors", r->whole},
              {"dropped_blobs", r->dropped_blobs}};
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << ckpt::step_dir_name(r->step) << " -> " << a.out << "/"
            << ckpt::step_dir_name(r->step) << ": " << o.to.text() << " (" << r->world_size
            << (r->world_size == 1 ? " rank), " : " ranks), ") << format_bytes(r->bytes_written)
            << " written for " << format_bytes(r->bytes_raw) << ", read "
            << format_bytes(r->bytes_read) << " in " << r->chunks_read << " chunks\n";
  for (const auto& t : r->whole) {
    std::cout << "note: tensor '" << t << "' has no placement: every rank holds it whole\n";
  }
  for (const auto& b : r->dropped_blobs) {
    std::cout << "note: blob " << b << " dropped (no such rank in the new layout)\n";
  }
}

}  // namespace

void add_ckpt_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("ckpt", "List, inspect, verify and compare checkpoints");
  cmd->require_subcommand(1);
  struct Args {
    std::string path, other;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* ls = cmd->add_subcommand("ls",
                                     "Steps in a checkpoint directory: committed or not, "
                                     "full or delta, size, layout");
  ls->add_option("dir", args->path, "Checkpoint directory")->required();
  ls->add_flag("--json", args->json, "Print JSON for machines");
  ls->callback([args] { run_ls(args->path, args->json); });

  CLI::App* inspect = cmd->add_subcommand("inspect", "Tensors, shapes and shards of DIR[/step-N]");
  inspect->add_option("path", args->path, "DIR (the latest step) or DIR/step-N")->required();
  inspect->add_flag("--json", args->json, "Print JSON for machines");
  inspect->callback([args] { run_inspect(args->path, args->json); });

  CLI::App* verify = cmd->add_subcommand(
      "verify",
      "Check every checksum of DIR (every committed step) or DIR/step-N; names the "
      "file and chunk that fail and exits 1");
  verify->add_option("path", args->path, "DIR or DIR/step-N")->required();
  verify->add_flag("--json", args->json, "Print JSON for machines");
  verify->callback([args] { run_verify(args->path, args->json); });

  CLI::App* diff = cmd->add_subcommand(
      "diff", "Compare the tensors of two checkpoints (any layouts); exits 1 when they differ");
  diff->add_option("a", args->path, "DIR or DIR/step-N")->required();
  diff->add_option("b", args->other, "DIR or DIR/step-N")->required();
  diff->add_flag("--json", args->json, "Print JSON for machines");
  diff->callback([args] { run_diff(args->path, args->other, args->json); });

  auto rs = std::make_shared<ReshardArgs>();
  CLI::App* reshard =
      cmd->add_subcommand("reshard",
                          "Rewrite a committed checkpoint for another parallel layout (offline): "
                          "tessera ckpt reshard SRC[/step-N] --to PLAN.json --out DST");
  reshard->footer(
      "PLAN.json: the output of `tessera plan --json` (plans[--plan-index], default the best) or "
      "one plan object {\"tp\", \"pp\", \"dp\", \"zero\"[, \"cp\", \"ep\", \"stage_layers\"]}. "
      "Optional \"tensors\": {\"NAME\": {\"tp_dim\", \"zero_dim\", \"zero_stage\", \"layer\", "
      "\"expert_dim\"}} override the placements the checkpoint recorded. Rank = tp_i + tp*(cp_i + "
      "cp*(dp_i + dp*pp_i)), ep_i = dp_i % ep; a tensor is split along tp_dim by tp, along "
      "expert_dim by ep, then along zero_dim over the ranks reducing its gradients (dp x cp, or "
      "dp/ep x cp for experts) when zero >= zero_stage; with pp > 1 only the stage holding its "
      "layer has it; without a placement every rank holds it whole. "
      "See docs/CHECKPOINT.md. Exit 1: the source fails verification; 2: bad arguments.");
  reshard->add_option("src", rs->src, "DIR (the step `latest` names) or DIR/step-N")->required();
  reshard->add_option("--to", rs->plan, "Layout file (PLAN.json)")->required();
  reshard->add_option("--out", rs->out, "Checkpoint directory to write (DST)")->required();
  reshard->add_option("--plan-index", rs->plan_index,
                      "Which of `tessera plan --json`'s plans (0: the best)");
  reshard->add_option("--zstd-level", rs->zstd_level, "zstd level of the written chunks");
  reshard->add_flag("--no-fsync", rs->no_fsync, "Skip fsync (throwaway output only)");
  reshard->add_flag("--json", rs->json, "Print JSON for machines");
  reshard->callback([rs] { run_reshard(*rs); });
}

#endif  // TESSERA_HAVE_CHECKPOINT

}  // namespace tessera::tools

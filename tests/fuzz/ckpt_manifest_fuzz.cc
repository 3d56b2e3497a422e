// Checkpoint manifests (runtime/checkpoint manifest.h) and layout files (layout.h). A manifest's
// checksum is no signature, so each input is parsed twice: as it is, and re-signed (its
// manifest_checksum recomputed, as anyone editing a manifest can), which lets the fuzzer past
// the checksum to the value checks. An accepted manifest must print and parse back unchanged.
#include <nlohmann/json.hpp>

#include "codec.h"
#include "fuzz_target.h"
#include "tessera/checkpoint/layout.h"
#include "tessera/checkpoint/manifest.h"

namespace {

namespace ckpt = tessera::ckpt;

// The input with a valid manifest_checksum, or "" when it is not a JSON object.
std::string resigned(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return {};
  try {
    j.erase("manifest_checksum");
    const std::string body = j.dump();
    j["manifest_checksum"] = ckpt::hex64(ckpt::codec::xxh3(body.data(), body.size()));
    return j.dump();
  } catch (const nlohmann::json::exception&) {
    return {};
  }
}

void check_manifest(std::string_view text) {
  auto parsed = ckpt::parse_manifest(text, "manifest.json");
  if (!parsed.ok()) return;
  const std::string printed = ckpt::manifest_to_json(*parsed);
  auto again = ckpt::parse_manifest(printed, "round trip");
  FUZZ_CHECK(again.ok(), "manifest_to_json of an accepted manifest does not parse");
  FUZZ_CHECK(ckpt::manifest_to_json(*again) == printed, "manifest round trip changed it");
  (void)parsed->bytes_stored();
  (void)parsed->bytes_raw();
}

}  // namespace

TESSERA_FUZZ_TARGET(ckpt_manifest) {
  const std::string_view text = tessera::fuzz::as_text(data, size);
  check_manifest(text);
  if (const std::string signed_text = resigned(text); !signed_text.empty()) {
    check_manifest(signed_text);
  }
  std::map<std::string, ckpt::Placement> placements;
  auto layout = ckpt::parse_layout_json(text, "layout.json", 0, &placements);
  if (layout.ok()) {
    FUZZ_CHECK(ckpt::check_layout_bounds(*layout, "fuzz").ok(), "accepted layout out of bounds");
    (void)layout->size();
    (void)layout->text();
  }
  return 0;
}

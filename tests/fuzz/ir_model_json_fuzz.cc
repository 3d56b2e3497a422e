// Model files (runtime/ir): a Hugging Face config.json and the generic layer list, as `tessera
// plan --model FILE` reads them. A parsed model passed validate_model, so its totals must not
// overflow (UBSan) and must be non-negative.
#include "fuzz_target.h"
#include "tessera/ir/loaders.h"

namespace {

void check_model(const tessera::Result<tessera::ir::Model>& model) {
  if (!model.ok()) return;
  FUZZ_CHECK(tessera::ir::validate_model(*model).ok(), "a loaded model fails validate_model");
  FUZZ_CHECK(tessera::ir::model_params(*model) >= 0, "negative parameter count");
  FUZZ_CHECK(tessera::ir::model_active_params(*model) >= 0, "negative active parameters");
  (void)tessera::ir::model_training_flops(*model, 1, 1);
}

}  // namespace

TESSERA_FUZZ_TARGET(ir_model_json) {
  const std::string_view text = tessera::fuzz::as_text(data, size);
  check_model(tessera::ir::model_from_hf_config(text, "config.json"));
  check_model(tessera::ir::model_from_layer_list(text, "layers.json"));
  return 0;
}

// Publishing a step written into step-N.tmp/: the manifest, made durable; the rename to step-N/,
// made durable; then `latest` replaced to name it. Each is durable (with `fsync`) before the next,
// so a crash leaves either an unpublished step-N.tmp/ (or step-N/ newer than `latest`), which the
// next writer replaces, or a published step. Used by the save's commit and by offline resharding.
#pragma once

#include <functional>

#include "step_paths.h"
#include "tessera/checkpoint/manifest.h"
#include "tessera/common/status.h"

namespace tessera::ckpt {

struct PublishHooks {
  // After the manifest is durable, before the rename (the save's fault point, clearing an
  // unpublished step-N/, refusing strays). An error publishes nothing.
  std::function<Status()> before_rename;
  // Between writing latest.tmp and renaming it over `latest` (the save's fault point).
  std::function<Status()> before_latest;
};

// On failure nothing is published (step-N/ is removed again once renamed) except when `latest`
// was already replaced: then the error says the step is published but maybe not durable.
// step-N.tmp/ is left to the caller, which knows what else it holds.
Status publish_step(const StepPaths& paths, const Manifest& manifest, bool fsync,
                    const PublishHooks& hooks = {});

}  // namespace tessera::ckpt

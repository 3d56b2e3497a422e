#include "publish.h"

#include "fs.h"

namespace tessera::ckpt {

Status publish_step(const StepPaths& paths, const Manifest& manifest, bool fsync,
                    const PublishHooks& hooks) {
  TSR_RETURN_IF_ERROR(fs::write_file(paths.tmp_manifest(), manifest_to_json(manifest), fsync));
  if (fsync) TSR_RETURN_IF_ERROR(fs::fsync_path(paths.tmp_dir));
  if (hooks.before_rename) TSR_RETURN_IF_ERROR(hooks.before_rename());
  TSR_RETURN_IF_ERROR(fs::rename_path(paths.tmp_dir, paths.final_dir));
  if (fsync) TSR_RETURN_IF_ERROR(fs::fsync_path(paths.root));
  bool renamed = false;
  Status published =
      fs::replace_file(paths.latest, paths.rel + "\n", fsync, hooks.before_latest, &renamed);
  if (published.ok()) return Status();
  if (renamed) {
    // `latest` names step-N/ now: deleting it would leave `latest` naming nothing.
    return published.with_context("step " + std::to_string(paths.step) + " ('" + paths.final_dir +
                                  "') was published ('latest' names '" + paths.rel +
                                  "') but its durability is unknown");
  }
  fs::remove_all(paths.final_dir).ignore();
  return published.with_context("publishing step " + std::to_string(paths.step) + " ('" +
                                paths.final_dir + "')");
}

}  // namespace tessera::ckpt

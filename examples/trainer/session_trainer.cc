#include "session_trainer.h"

#include "trainer.h"
#if TESSERA_TRAINER_HAVE_GPT
#include "gpt_session.h"
#endif

namespace tessera::trainer {

Result<std::unique_ptr<SessionTrainer>> create_session_trainer(
    const TrainOptions& options, std::shared_ptr<coll::Bootstrap> bootstrap) {
  if (!options.gpt_config.empty()) {
#if TESSERA_TRAINER_HAVE_GPT
    return create_gpt_session_trainer(options, std::move(bootstrap));
#else
    return unimplemented("--gpt-config " + options.gpt_config +
                         ": this build has no GPT trainer (examples/trainer/gpt needs the IR)");
#endif
  }
  TSR_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> mlp,
                       Trainer::create(options, std::move(bootstrap)));
  return std::unique_ptr<SessionTrainer>(std::move(mlp));
}

Status check_trainer_plan(const TrainOptions& options, const TrainPlan& plan, int64_t global_batch,
                          int world) {
#if TESSERA_TRAINER_HAVE_GPT
  if (!options.gpt_config.empty()) return check_gpt_plan(plan, global_batch, world);
#endif
  return validate_plan(plan, options.model, global_batch, world);
}

}  // namespace tessera::trainer

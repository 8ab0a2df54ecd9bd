"use strict";
const $ = (id) => document.getElementById(id);
function say(error, status) { $("error").textContent = error || ""; $("status").textContent = status || ""; }
async function loadModel(describe) {
  try {
    const info = await (await fetch("/v1/model")).json();
    $("model-meta").textContent = info.name + " · " + describe(info) + " · step " + info.step;
    return info;
  } catch (e) { $("model-meta").textContent = "the model could not be read: " + e; return null; }
}
async function post(url, body, type) {
  const response = await fetch(url, {method: "POST", headers: {"Content-Type": type}, body: body});
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.detail || response.statusText);
  return answer;
}
